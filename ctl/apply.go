package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/jsonmergepatch"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/ctl/output"
)

// manifest is one object read from a file.
type manifest struct {
	obj    *unstructured.Unstructured
	res    *api.Resource
	source string
}

// readManifests reads every object of the files, directories (their .yaml,
// .yml and .json files) and "-" (stdin) given with -f.
func (a *App) readManifests(paths []string) ([]manifest, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("must specify one of -f and -k: pass the manifests with -f FILE|DIR|-")
	}
	var out []manifest
	for _, p := range paths {
		var files []string
		if p == "-" {
			files = []string{"-"}
		} else {
			fi, err := os.Stat(p)
			if err != nil {
				return nil, fmt.Errorf("the path %q does not exist", p)
			}
			if fi.IsDir() {
				entries, err := os.ReadDir(p)
				if err != nil {
					return nil, err
				}
				for _, e := range entries {
					switch filepath.Ext(e.Name()) {
					case ".yaml", ".yml", ".json":
						files = append(files, filepath.Join(p, e.Name()))
					}
				}
				sort.Strings(files)
			} else {
				files = []string{p}
			}
		}
		for _, f := range files {
			var r io.Reader
			if f == "-" {
				r = a.In
			} else {
				b, err := os.ReadFile(f)
				if err != nil {
					return nil, err
				}
				r = bytes.NewReader(b)
			}
			ms, err := decodeManifests(r, f)
			if err != nil {
				return nil, err
			}
			out = append(out, ms...)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no objects passed to apply")
	}
	return out, nil
}

func decodeManifests(r io.Reader, source string) ([]manifest, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var out []manifest
	for doc := 1; ; doc++ {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("error parsing %s (document %d): %w", source, doc, err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		objs := []*unstructured.Unstructured{u}
		if u.IsList() {
			l, err := u.ToList()
			if err != nil {
				return nil, fmt.Errorf("error parsing %s (document %d): %w", source, doc, err)
			}
			objs = nil
			for i := range l.Items {
				objs = append(objs, &l.Items[i])
			}
		}
		for _, o := range objs {
			gvk := o.GroupVersionKind()
			if gvk.Kind == "" || gvk.Version == "" {
				return nil, fmt.Errorf("error validating %s (document %d): apiVersion and kind must be set", source, doc)
			}
			r, ok := api.ResourceForKind(gvk)
			if !ok {
				return nil, fmt.Errorf("resource mapping not found for name: %q namespace: %q from %q: no matches for kind %q in version %q",
					o.GetName(), o.GetNamespace(), source, gvk.Kind, gvk.GroupVersion())
			}
			if o.GetName() == "" {
				return nil, fmt.Errorf("error validating %s (document %d): %s without metadata.name", source, doc, gvk.Kind)
			}
			out = append(out, manifest{obj: o, res: r, source: source})
		}
	}
}

// target fills in the namespace and refuses a conflicting -n.
func (a *App) target(c *Clients, m manifest) (string, error) {
	if !m.res.Namespaced {
		m.obj.SetNamespace("")
		return "", nil
	}
	ns := m.obj.GetNamespace()
	switch {
	case ns == "":
		ns = c.Namespace
		m.obj.SetNamespace(ns)
	case a.flags.Namespace != "" && a.flags.Namespace != ns:
		return "", fmt.Errorf("the namespace from the provided object %q does not match the namespace %q. You must pass '--namespace=%s' to perform this operation", ns, a.flags.Namespace, ns)
	}
	return ns, nil
}

func (a *App) applyCommand() *cobra.Command {
	var files []string
	var force bool
	cmd := &cobra.Command{
		Use:   "apply -f FILE|DIR|-",
		Short: "Create or update objects from manifests (for objects that are not in Git)",
		Long: "apply creates the objects of the manifests or updates them with a three-way merge of the\n" +
			"last applied manifest, the new one and the live object, as kubectl apply does. Objects a\n" +
			"GitSource applied are refused unless --force: change them in Git, or the next sync reverts them.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ms, err := a.readManifests(files)
			if err != nil {
				return err
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			failed := false
			for _, m := range ms {
				result, err := a.applyOne(cmd.Context(), c, m, force)
				if err != nil {
					a.report(err)
					failed = true
					continue
				}
				fmt.Fprintf(a.Out, "%s/%s %s\n", output.KindGroup(m.res.GVK()), m.obj.GetName(), result)
			}
			if failed {
				return errReported
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "manifest file, directory or - for stdin (repeatable)")
	cmd.Flags().BoolVar(&force, "force", false, "also change objects that a GitSource applied")
	return cmd
}

func (a *App) applyOne(ctx context.Context, c *Clients, m manifest, force bool) (string, error) {
	ns, err := a.target(c, m)
	if err != nil {
		return "", err
	}
	rc, err := c.clientFor(m.res, ns)
	if err != nil {
		return "", err
	}
	// The last-applied annotation holds the manifest without itself.
	ann := m.obj.GetAnnotations()
	delete(ann, corev1.LastAppliedConfigAnnotation)
	m.obj.SetAnnotations(ann)
	if len(ann) == 0 {
		unstructured.RemoveNestedField(m.obj.Object, "metadata", "annotations")
	}
	lastApplied, err := json.Marshal(m.obj.Object)
	if err != nil {
		return "", err
	}
	if ann == nil {
		ann = map[string]string{}
	}
	ann[corev1.LastAppliedConfigAnnotation] = string(lastApplied) + "\n"
	m.obj.SetAnnotations(ann)
	modified, err := json.Marshal(m.obj.Object)
	if err != nil {
		return "", err
	}
	typed := m.res.New()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(m.obj.Object, typed, true); err != nil {
		return "", fmt.Errorf("error validating %q: %s %q: %w", m.source, m.res.Kind, m.obj.GetName(), err)
	}

	current, err := rc.Get(ctx, m.obj.GetName())
	if apierrors.IsNotFound(err) {
		if _, err := rc.Create(ctx, typed); err != nil {
			return "", err
		}
		return "created", nil
	}
	if err != nil {
		return "", err
	}
	cm, err := meta.Accessor(current)
	if err != nil {
		return "", err
	}
	if src := cm.GetLabels()[api.LabelSource]; src != "" && !force {
		return "", fmt.Errorf("%s/%s is applied from GitSource %s (label %s): change it in Git, where the next sync would restore it, or pass --force",
			output.KindGroup(m.res.GVK()), m.obj.GetName(), src, api.LabelSource)
	}
	original := []byte(cm.GetAnnotations()[corev1.LastAppliedConfigAnnotation])
	// Typed clients drop apiVersion and kind; without them the patch would
	// "add" them and never come out empty.
	current = current.DeepCopyObject()
	current.GetObjectKind().SetGroupVersionKind(m.res.GVK())
	currentJSON, err := json.Marshal(current)
	if err != nil {
		return "", err
	}
	var patch []byte
	pt := types.StrategicMergePatchType
	if m.res.GVR.GroupVersion() == v1alpha1.SchemeGroupVersion {
		// Flotilla's own kinds have no strategic merge keys.
		pt = types.MergePatchType
		patch, err = jsonmergepatch.CreateThreeWayJSONMergePatch(original, modified, currentJSON)
	} else {
		var lookup strategicpatch.LookupPatchMeta
		if lookup, err = strategicpatch.NewPatchMetaFromStruct(m.res.New()); err == nil {
			patch, err = strategicpatch.CreateThreeWayMergePatch(original, modified, currentJSON, lookup, true)
		}
	}
	if err != nil {
		return "", fmt.Errorf("computing the patch for %s %q: %w", m.res.Kind, m.obj.GetName(), err)
	}
	if string(patch) == "{}" {
		return "unchanged", nil
	}
	if _, err := rc.Patch(ctx, m.obj.GetName(), pt, patch); err != nil {
		return "", err
	}
	return "configured", nil
}

func (a *App) deleteCommand() *cobra.Command {
	var files []string
	var ignoreNotFound, force bool
	var grace int64
	cmd := &cobra.Command{
		Use:   "delete (-f FILE|DIR|- | KIND NAME... | KIND/NAME...)",
		Short: "Delete objects named in manifests or on the command line (for objects that are not in Git)",
		RunE: func(cmd *cobra.Command, args []string) error {
			var targets []manifest
			if len(files) > 0 {
				if len(args) > 0 {
					return fmt.Errorf("pass either -f or KIND NAME, not both")
				}
				ms, err := a.readManifests(files)
				if err != nil {
					return err
				}
				targets = ms
			} else {
				reqs, err := parseRequests(args)
				if err != nil {
					return err
				}
				for _, rq := range reqs {
					if len(rq.names) == 0 {
						return fmt.Errorf("name the %s to delete (deleting every object of a kind is not supported)", rq.res.GVR.Resource)
					}
					for _, n := range rq.names {
						u := &unstructured.Unstructured{}
						u.SetName(n)
						targets = append(targets, manifest{obj: u, res: rq.res, source: "command line"})
					}
				}
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			opts := metav1.DeleteOptions{}
			if grace >= 0 {
				opts.GracePeriodSeconds = &grace
			}
			failed := false
			for _, m := range targets {
				if err := a.deleteOne(cmd.Context(), c, m, opts, force); err != nil {
					if ignoreNotFound && apierrors.IsNotFound(err) {
						continue
					}
					a.report(err)
					failed = true
					continue
				}
				fmt.Fprintf(a.Out, "%s %q deleted\n", output.KindGroup(m.res.GVK()), m.obj.GetName())
			}
			if failed {
				return errReported
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "manifest file, directory or - for stdin (repeatable)")
	cmd.Flags().BoolVar(&ignoreNotFound, "ignore-not-found", false, "say nothing about objects that do not exist")
	cmd.Flags().BoolVar(&force, "force", false, "also delete objects that a GitSource applied")
	cmd.Flags().Int64Var(&grace, "grace-period", -1, "seconds a pod gets to stop (-1: its own terminationGracePeriodSeconds)")
	return cmd
}

func (a *App) deleteOne(ctx context.Context, c *Clients, m manifest, opts metav1.DeleteOptions, force bool) error {
	ns, err := a.target(c, m)
	if err != nil {
		return err
	}
	rc, err := c.clientFor(m.res, ns)
	if err != nil {
		return err
	}
	if !force {
		cur, err := rc.Get(ctx, m.obj.GetName())
		if err != nil {
			return err
		}
		if cm, err := meta.Accessor(cur); err == nil && cm.GetLabels()[api.LabelSource] != "" {
			return fmt.Errorf("%s/%s is applied from GitSource %s: remove it from Git (the sync prunes it), or pass --force (the next sync recreates it)",
				output.KindGroup(m.res.GVK()), m.obj.GetName(), cm.GetLabels()[api.LabelSource])
		}
	}
	return rc.Delete(ctx, m.obj.GetName(), opts)
}
