package ctl

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/ctl/output"
)

// request is one kind and, optionally, the names asked for.
type request struct {
	res   *api.Resource
	names []string
}

// parseRequests reads "kind [name...]", "kind1,kind2" and "kind/name ...".
func parseRequests(args []string) ([]request, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("you must specify the type of resource: one of %s", kindList())
	}
	if strings.Contains(args[0], "/") {
		var out []request
		for _, a := range args {
			kind, name, ok := strings.Cut(a, "/")
			if !ok || kind == "" || name == "" {
				return nil, fmt.Errorf("there is no need to specify a resource type as a separate argument when passing arguments in resource/name form (got %q)", a)
			}
			r, err := api.Lookup(kind)
			if err != nil {
				return nil, err
			}
			out = append(out, request{res: r, names: []string{name}})
		}
		return out, nil
	}
	kinds := strings.Split(args[0], ",")
	if len(kinds) > 1 && len(args) > 1 {
		return nil, fmt.Errorf("names cannot be given with several resource types; use kind/name instead")
	}
	var out []request
	for _, k := range kinds {
		r, err := api.Lookup(k)
		if err != nil {
			return nil, fmt.Errorf("%w; served are %s", err, kindList())
		}
		out = append(out, request{res: r, names: args[1:]})
	}
	return out, nil
}

func kindList() string {
	var names []string
	for _, r := range api.Resources() {
		names = append(names, r.GVR.Resource)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

type getOptions struct {
	selector, fieldSelector, output string
	watch, watchOnly                bool
	noHeaders, showLabels           bool
	ignoreNotFound                  bool
	showManagedFields               bool
}

func (a *App) getCommand() *cobra.Command {
	var o getOptions
	cmd := &cobra.Command{
		Use:   "get KIND [NAME...] | KIND/NAME...",
		Short: "Show objects of a kind as a table, YAML, JSON, names or JSONPath",
		Example: "  flotctl get pods -A\n  flotctl get nodes -o wide\n  flotctl get deploy web -o yaml\n" +
			"  flotctl get pods -l app=web -w\n  flotctl get gitsources -o jsonpath='{.items[*].status.lastAppliedCommit}'",
		ValidArgsFunction: completeKinds,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runGet(cmd.Context(), args, o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.selector, "selector", "l", "", "label selector, e.g. -l app=web,tier!=db")
	f.StringVar(&o.fieldSelector, "field-selector", "", "field selector, e.g. --field-selector spec.nodeName=edge-1")
	f.StringVarP(&o.output, "output", "o", "", "output format: wide, yaml, json, name or jsonpath=TEMPLATE")
	f.BoolVarP(&o.watch, "watch", "w", false, "after listing, watch for changes")
	f.BoolVar(&o.watchOnly, "watch-only", false, "watch for changes without listing first")
	f.BoolVar(&o.noHeaders, "no-headers", false, "leave out the table header")
	f.BoolVar(&o.showLabels, "show-labels", false, "add a LABELS column")
	f.BoolVar(&o.showManagedFields, "show-managed-fields", false, "keep metadata.managedFields in yaml, json and jsonpath output")
	f.BoolVar(&o.ignoreNotFound, "ignore-not-found", false, "say nothing about names that do not exist")
	a.addAllNamespaces(cmd)
	return cmd
}

func (a *App) runGet(ctx context.Context, args []string, o getOptions) error {
	reqs, err := parseRequests(args)
	if err != nil {
		return err
	}
	format, err := output.Parse(o.output)
	if err != nil {
		return err
	}
	format.ShowManagedFields = o.showManagedFields
	if _, err := fields.ParseSelector(o.fieldSelector); err != nil {
		return fmt.Errorf("invalid field selector %q: %w", o.fieldSelector, err)
	}
	if (o.watch || o.watchOnly) && len(reqs) != 1 {
		return fmt.Errorf("watch is only supported on one resource type at a time")
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	ns := a.namespace(c)
	failed := false
	var combined []runtime.Object // for non-table formats, one List of everything
	printedTable := false
	for _, rq := range reqs {
		rc, err := c.clientFor(rq.res, ns)
		if err != nil {
			return err
		}
		if o.watchOnly {
			return a.watch(ctx, rc, rq, format, o, "", !o.noHeaders)
		}
		var obj runtime.Object
		if len(rq.names) > 0 {
			var items []runtime.Object
			for _, name := range rq.names {
				it, err := rc.Get(ctx, name)
				if err != nil {
					if o.ignoreNotFound && apierrors.IsNotFound(err) {
						continue
					}
					a.report(err)
					failed = true
					continue
				}
				items = append(items, it)
			}
			if len(items) == 0 {
				continue
			}
			if len(items) == 1 && len(reqs) == 1 && len(rq.names) == 1 {
				obj = items[0]
			} else {
				obj = rq.res.NewList()
				if err := meta.SetList(obj, items); err != nil {
					return err
				}
			}
		} else {
			obj, err = rc.List(ctx, metav1.ListOptions{LabelSelector: o.selector, FieldSelector: o.fieldSelector})
			if err != nil {
				return err
			}
		}
		if format.IsTable() {
			if meta.LenList(obj) == 0 && meta.IsListType(obj) {
				if !o.watch && len(rq.names) == 0 {
					fmt.Fprintln(a.Err, noResources(rq.res, ns))
				}
			} else {
				if printedTable {
					fmt.Fprintln(a.Out)
				}
				topts := output.TableOptions{Now: a.now(), NoHeaders: o.noHeaders, ShowLabels: o.showLabels,
					WithNamespace: a.flags.AllNamespaces && rq.res.Namespaced}
				if err := format.Print(a.Out, obj, topts); err != nil {
					return err
				}
				printedTable = true
			}
		} else {
			its, err := output.Items(obj)
			if err != nil {
				return err
			}
			combined = append(combined, its...)
		}
		if o.watch {
			for _, it := range combined {
				if err := printWatched(a.Out, format, it, output.TableOptions{}); err != nil {
					return err
				}
			}
			rv := ""
			if m, err := meta.ListAccessor(obj); err == nil && meta.IsListType(obj) {
				rv = m.GetResourceVersion()
			} else if m, err := meta.Accessor(obj); err == nil {
				rv = m.GetResourceVersion()
			}
			return a.watch(ctx, rc, rq, format, o, rv, !o.noHeaders && !printedTable)
		}
	}
	if !format.IsTable() && !(o.watch || o.watchOnly) {
		single := len(reqs) == 1 && len(reqs[0].names) == 1
		switch {
		case single && len(combined) == 1:
			if err := format.Print(a.Out, combined[0], output.TableOptions{}); err != nil {
				return err
			}
		case !single:
			list := &metav1.List{Items: []runtime.RawExtension{}}
			for _, it := range combined {
				list.Items = append(list.Items, runtime.RawExtension{Object: it})
			}
			if err := format.Print(a.Out, list, output.TableOptions{}); err != nil {
				return err
			}
		}
	}
	if failed {
		return errReported
	}
	return nil
}

func noResources(r *api.Resource, ns string) string {
	if !r.Namespaced || ns == "" {
		return "No resources found"
	}
	return fmt.Sprintf("No resources found in %s namespace.", ns)
}

// watch prints every change after rv until the context ends. A watch the
// hub closes is resumed from the last version seen; one that is too old
// to resume ends with the hub's error.
func (a *App) watch(ctx context.Context, rc resourceClient, rq request, format output.Format, o getOptions, rv string, headers bool) error {
	opts := metav1.ListOptions{LabelSelector: o.selector, FieldSelector: o.fieldSelector, ResourceVersion: rv, AllowWatchBookmarks: true}
	if len(rq.names) == 1 {
		sel := fields.OneTermEqualSelector("metadata.name", rq.names[0])
		if o.fieldSelector != "" {
			sel = fields.AndSelectors(sel, fields.ParseSelectorOrDie(o.fieldSelector))
		}
		opts.FieldSelector = sel.String()
	}
	for {
		w, err := rc.Watch(ctx, opts)
		if err != nil {
			return err
		}
		closed, err := a.printEvents(ctx, w, format, o, rq, &opts, &headers)
		w.Stop()
		if err != nil || !closed || ctx.Err() != nil {
			return err
		}
	}
}

func (a *App) printEvents(ctx context.Context, w watch.Interface, format output.Format, o getOptions, rq request, opts *metav1.ListOptions, headers *bool) (closed bool, err error) {
	for {
		select {
		case <-ctx.Done():
			return false, nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return true, nil
			}
			switch ev.Type {
			case watch.Error:
				return false, apierrors.FromObject(ev.Object)
			case watch.Bookmark:
				if m, err := meta.Accessor(ev.Object); err == nil {
					opts.ResourceVersion = m.GetResourceVersion()
				}
				continue
			}
			if m, err := meta.Accessor(ev.Object); err == nil {
				opts.ResourceVersion = m.GetResourceVersion()
				if len(rq.names) > 1 && !slices.Contains(rq.names, m.GetName()) {
					continue
				}
			}
			topts := output.TableOptions{Now: a.now(), NoHeaders: !*headers, ShowLabels: o.showLabels, WithNamespace: a.flags.AllNamespaces && rq.res.Namespaced}
			*headers = false
			if err := printWatched(a.Out, format, ev.Object, topts); err != nil {
				return false, err
			}
		}
	}
}

func printWatched(w io.Writer, format output.Format, obj runtime.Object, topts output.TableOptions) error {
	if format.Kind == "yaml" {
		fmt.Fprintln(w, "---")
	}
	return format.Print(w, obj, topts)
}
