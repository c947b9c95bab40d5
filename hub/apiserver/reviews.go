package apiserver

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The self reviews answer a client what it may do (kubectl auth can-i)
// and who the hub takes it for (kubectl auth whoami), from the hub's own
// authenticator and authorizer. They are created, never stored, and every
// authenticated client may create them (kube-apiserver's
// system:basic-user).

// A selfReview is one such resource.
type selfReview struct {
	gvr  schema.GroupVersionResource
	kind string
}

var selfReviews = []selfReview{
	{authorizationv1.SchemeGroupVersion.WithResource("selfsubjectaccessreviews"), "SelfSubjectAccessReview"},
	{authorizationv1.SchemeGroupVersion.WithResource("selfsubjectrulesreviews"), "SelfSubjectRulesReview"},
	{authenticationv1.SchemeGroupVersion.WithResource("selfsubjectreviews"), "SelfSubjectReview"},
}

// RulesLister is an Authorizer that can also list what a user may do in
// a namespace, for SelfSubjectRulesReview (kubectl auth can-i --list).
// incomplete says the rules leave out permissions that depend on other
// objects (a device's pods, the Secrets they use).
type RulesLister interface {
	RulesFor(u *UserInfo, namespace string) (resource []authorizationv1.ResourceRule, nonResource []authorizationv1.NonResourceRule, incomplete bool)
}

func (v selfReview) path() string {
	return "/apis/" + v.gvr.Group + "/" + v.gvr.Version + "/" + v.gvr.Resource
}

// IsSelfReviewPath reports whether path is where a self review is
// created; the authorizer lets every authenticated client POST there.
func IsSelfReviewPath(path string) bool {
	_, ok := selfReviewAt(path)
	return ok
}

func selfReviewAt(path string) (selfReview, bool) {
	path = strings.TrimSuffix(path, "/")
	for _, v := range selfReviews {
		if v.path() == path {
			return v, true
		}
	}
	return selfReview{}, false
}

// selfReviewGroups are the group-versions discovery lists for them.
func selfReviewGroups() []schema.GroupVersion {
	var out []schema.GroupVersion
	for _, v := range selfReviews {
		if gv := v.gvr.GroupVersion(); !slices.Contains(out, gv) {
			out = append(out, gv)
		}
	}
	return out
}

func selfReviewResources(gv schema.GroupVersion) []metav1.APIResource {
	var out []metav1.APIResource
	for _, v := range selfReviews {
		if v.gvr.GroupVersion() == gv {
			out = append(out, metav1.APIResource{Name: v.gvr.Resource, Kind: v.kind, Verbs: metav1.Verbs{"create"}})
		}
	}
	return out
}

// serveSelfReview answers a self review at r's path; false when the path
// is not one.
func (s *Server) serveSelfReview(w http.ResponseWriter, r *http.Request) bool {
	v, ok := selfReviewAt(r.URL.Path)
	if !ok {
		return false
	}
	if err := s.selfReview(w, r, v); err != nil {
		s.writeError(w, r, err, nil)
	}
	return true
}

func (s *Server) selfReview(w http.ResponseWriter, r *http.Request, v selfReview) error {
	if r.Method != http.MethodPost {
		return apierrors.NewMethodNotSupported(v.gvr.GroupResource(), r.Method)
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	data, err := bodyToJSON(r, body)
	if err != nil {
		return err
	}
	user := UserFrom(r.Context())
	switch v.kind {
	case "SelfSubjectReview":
		var rev authenticationv1.SelfSubjectReview
		if err := json.Unmarshal(data, &rev); err != nil {
			return badRequest("the body is not a SelfSubjectReview: %v", err)
		}
		rev.TypeMeta = metav1.TypeMeta{Kind: v.kind, APIVersion: v.gvr.GroupVersion().String()}
		rev.Status.UserInfo = authenticationv1.UserInfo{Username: user.Name, Groups: user.Groups}
		writeJSON(w, http.StatusCreated, &rev)
		return nil
	case "SelfSubjectRulesReview":
		var rev authorizationv1.SelfSubjectRulesReview
		if err := json.Unmarshal(data, &rev); err != nil {
			return badRequest("the body is not a SelfSubjectRulesReview: %v", err)
		}
		rev.TypeMeta = metav1.TypeMeta{Kind: v.kind, APIVersion: v.gvr.GroupVersion().String()}
		if rl, ok := s.cfg.Authorizer.(RulesLister); ok {
			st := &rev.Status
			st.ResourceRules, st.NonResourceRules, st.Incomplete = rl.RulesFor(user, rev.Spec.Namespace)
			if st.Incomplete {
				st.EvaluationError = "some permissions depend on other objects (a device's pods, and the Secrets and ConfigMaps they use) and are not listed; ask about one action with kubectl auth can-i VERB RESOURCE/NAME"
			}
		} else {
			rev.Status.Incomplete = true
			rev.Status.EvaluationError = "this hub's authorizer cannot list its rules; ask about one action with a SelfSubjectAccessReview (kubectl auth can-i VERB RESOURCE)"
		}
		writeJSON(w, http.StatusCreated, &rev)
		return nil
	}
	var rev authorizationv1.SelfSubjectAccessReview
	if err := json.Unmarshal(data, &rev); err != nil {
		return badRequest("the body is not a SelfSubjectAccessReview: %v", err)
	}
	a := Attributes{User: user}
	switch ra, na := rev.Spec.ResourceAttributes, rev.Spec.NonResourceAttributes; {
	case ra != nil && na != nil:
		return invalidReview(v, "give resourceAttributes or nonResourceAttributes, not both")
	case ra != nil:
		a.Verb, a.APIGroup, a.Resource, a.Subresource, a.Namespace, a.Name = ra.Verb, ra.Group, ra.Resource, ra.Subresource, ra.Namespace, ra.Name
	case na != nil:
		a.Verb, a.Path = strings.ToLower(na.Verb), na.Path
	default:
		return invalidReview(v, "give resourceAttributes (verb, group, resource, namespace, name) or nonResourceAttributes (verb, path)")
	}
	allowed, reason, err := s.cfg.Authorizer.Authorize(r.Context(), a)
	if err != nil {
		rev.Status.EvaluationError = err.Error()
	}
	rev.TypeMeta = metav1.TypeMeta{Kind: v.kind, APIVersion: v.gvr.GroupVersion().String()}
	rev.Status.Allowed, rev.Status.Reason = allowed, reason
	writeJSON(w, http.StatusCreated, &rev)
	return nil
}

func invalidReview(v selfReview, msg string) error {
	return apierrors.NewInvalid(schema.GroupKind{Group: v.gvr.Group, Kind: v.kind}, "",
		field.ErrorList{field.Invalid(field.NewPath("spec"), nil, msg)})
}
