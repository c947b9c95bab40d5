package validation

import (
	"fmt"
	"net"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/validate/content"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"flotilla.dev/flotilla/api/defaults"
	"flotilla.dev/flotilla/api/v1alpha1"
)

// Bounds of a GitSource.
const (
	MinGitInterval = time.Second
	MinGitTimeout  = time.Second
	MaxGitHistory  = 10
)

var (
	gitSchemes      = []string{"file", "https", "http", "ssh", "git"}
	gitVerifyModes  = []string{defaults.GitVerifyModeHead}
	commitHash      = regexp.MustCompile(`^(?:[0-9a-fA-F]{40}|[0-9a-fA-F]{64})$`)
	scpLikeGitURL   = regexp.MustCompile(`^(?:[A-Za-z0-9._~-]+@)?([A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\]):(.+)$`)
	forbiddenRefChr = " ~^:?*[\\\x7f"
)

func validateGitSource(gs *v1alpha1.GitSource) field.ErrorList {
	errs := objectMeta(&gs.ObjectMeta, true, nameIsDNSLabel)
	// Objects applied from the source carry "<namespace>.<name>" as a label
	// value, which may not be longer than 63 characters.
	if gs.Name != "" && gs.Namespace != "" {
		if label := gs.Namespace + "." + gs.Name; len(label) > content.LabelValueMaxLength {
			errs = append(errs, field.Invalid(metaPath.Child("name"), gs.Name, fmt.Sprintf(
				"must be no more than %d characters: the label %s=<namespace>.<name> of the applied objects is limited to %d",
				content.LabelValueMaxLength-len(gs.Namespace)-1, "flotilla.dev/source", content.LabelValueMaxLength)))
		}
	}
	return append(errs, validateGitSourceSpec(gs)...)
}

func validateGitSourceSpec(gs *v1alpha1.GitSource) field.ErrorList {
	var errs field.ErrorList
	s := &gs.Spec
	errs = append(errs, validateGitURL(s.URL, s.SecretRef != nil, specPath.Child("url"))...)
	if s.Verify == nil && unprotectedGitURL(s.URL) {
		errs = append(errs, field.Required(specPath.Child("verify"),
			"a repository reached over http:// or git:// can be altered by anyone on the way: verify its commits' signatures (spec.verify), or use https:// or ssh://"))
	}

	rp := specPath.Child("ref")
	if s.Ref.Branch == "" && s.Ref.Tag == "" && s.Ref.Commit == "" {
		errs = append(errs, field.Required(rp, "one of `branch`, `tag` or `commit` is required"))
	}
	if s.Ref.Branch != "" && s.Ref.Tag != "" {
		// A commit may come with a branch or tag (it is fetched from
		// there); a branch and a tag name two different commits.
		errs = append(errs, field.Forbidden(rp.Child("tag"), "may not be set together with `branch`: follow either a branch or a tag"))
	}
	if s.Ref.Branch != "" {
		errs = append(errs, validateGitRefName(s.Ref.Branch, rp.Child("branch"))...)
	}
	if s.Ref.Tag != "" {
		errs = append(errs, validateGitRefName(s.Ref.Tag, rp.Child("tag"))...)
	}
	if s.Ref.Commit != "" && !commitHash.MatchString(s.Ref.Commit) {
		errs = append(errs, field.Invalid(rp.Child("commit"), s.Ref.Commit, "must be a full commit hash: 40 (SHA-1) or 64 (SHA-256) hexadecimal digits"))
	}

	seen := map[string]bool{}
	for i, p := range s.Paths {
		pp := specPath.Child("paths").Index(i)
		switch {
		case p == "":
			errs = append(errs, field.Invalid(pp, p, "must not be empty: leave `paths` out to load the whole repository"))
		case strings.HasPrefix(p, "/"):
			errs = append(errs, field.Invalid(pp, p, "must be a relative path inside the repository"))
		case hasDotDot(p):
			errs = append(errs, field.Invalid(pp, p, "must not contain '..'"))
		default:
			clean := path.Clean(p)
			if seen[clean] {
				errs = append(errs, field.Duplicate(pp, p))
			}
			seen[clean] = true
		}
	}
	if s.Interval == nil {
		errs = append(errs, field.Required(specPath.Child("interval"), ""))
	} else if s.Interval.Duration < MinGitInterval {
		errs = append(errs, field.Invalid(specPath.Child("interval"), s.Interval.Duration.String(), fmt.Sprintf("must be at least %s", MinGitInterval)))
	}
	if s.Timeout == nil {
		errs = append(errs, field.Required(specPath.Child("timeout"), ""))
	} else if s.Timeout.Duration < MinGitTimeout {
		errs = append(errs, field.Invalid(specPath.Child("timeout"), s.Timeout.Duration.String(), fmt.Sprintf("must be at least %s", MinGitTimeout)))
	}
	if s.SecretRef != nil {
		errs = requireString(errs, specPath.Child("secretRef", "name"), s.SecretRef.Name, dnsSubdomain)
	}
	if s.WebhookSecretRef != nil {
		errs = requireString(errs, specPath.Child("webhookSecretRef", "name"), s.WebhookSecretRef.Name, dnsSubdomain)
	}
	if v := s.Verify; v != nil {
		vp := specPath.Child("verify")
		if !oneOf(v.Mode, gitVerifyModes...) {
			errs = append(errs, field.NotSupported(vp.Child("mode"), v.Mode, gitVerifyModes))
		}
		errs = requireString(errs, vp.Child("secretRef", "name"), v.SecretRef.Name, dnsSubdomain)
	}
	return errs
}

// unprotectedGitURL reports whether url reaches another machine over a
// transport that neither encrypts nor authenticates (http://, git://):
// what arrives is then only as good as the signatures on the commits.
// Loopback stays allowed: nothing crosses a network.
func unprotectedGitURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "git") {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return false
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return false
	}
	return true
}

// validateGitURL accepts the URL forms git itself accepts for the
// transports the hub speaks. Credentials belong in a Secret: a URL is shown
// in status, events and logs.
func validateGitURL(raw string, hasSecret bool, p *field.Path) field.ErrorList {
	if raw == "" {
		return field.ErrorList{field.Required(p, "the repository to follow, e.g. https://git.example.com/fleet.git, git@host:fleet.git or file:///srv/git/fleet.git")}
	}
	if strings.ContainsAny(raw, " \t\r\n") {
		return field.ErrorList{field.Invalid(p, raw, "must not contain whitespace")}
	}
	if !strings.Contains(raw, "://") {
		if m := scpLikeGitURL.FindStringSubmatch(raw); m != nil && !strings.Contains(m[1], "/") {
			return nil
		}
		return field.ErrorList{field.Invalid(p, raw, "must be a URL (https://, ssh://, git://, file://) or an SSH address like git@host:path/repo.git")}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return field.ErrorList{field.Invalid(p, "<unparseable URL>", fmt.Sprintf("must be a valid URL: %v", redactURLError(err)))}
	}
	shown := u.Redacted()
	if !oneOf(u.Scheme, gitSchemes...) {
		return field.ErrorList{field.NotSupported(p, shown, gitSchemes)}
	}
	if _, hasPassword := u.User.Password(); hasPassword {
		return field.ErrorList{field.Invalid(p, shown, "must not contain a password: put the credentials in a Secret and name it in `spec.secretRef`")}
	}
	switch u.Scheme {
	case "file":
		if u.Path == "" || u.Path == "/" {
			return field.ErrorList{field.Invalid(p, shown, "must name a repository path, e.g. file:///srv/git/fleet.git")}
		}
	default:
		if u.Host == "" {
			return field.ErrorList{field.Invalid(p, shown, "must name a host")}
		}
		if strings.Trim(u.Path, "/") == "" {
			return field.ErrorList{field.Invalid(p, shown, "must name a repository path after the host")}
		}
	}
	if hasSecret && (u.Scheme == "http" || u.Scheme == "git") {
		return field.ErrorList{field.Invalid(p, shown, "credentials are only sent over https:// or ssh://: use one of these with `spec.secretRef`")}
	}
	return nil
}

// redactURLError drops the URL that url.Parse quotes in its errors, which
// may carry a token.
func redactURLError(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

// validateGitRefName applies git check-ref-format's rules to a branch or
// tag name.
func validateGitRefName(name string, p *field.Path) field.ErrorList {
	bad := func(why string) field.ErrorList {
		return field.ErrorList{field.Invalid(p, name, "not a valid git branch or tag name: "+why)}
	}
	for _, r := range name {
		if r < 0x20 || strings.ContainsRune(forbiddenRefChr, r) {
			return bad(fmt.Sprintf("must not contain %q", r))
		}
	}
	switch {
	case strings.HasPrefix(name, "refs/"):
		return bad("give the short name, without refs/heads/ or refs/tags/")
	case name == "@":
		return bad(`must not be "@"`)
	case strings.HasPrefix(name, "-"):
		return bad("must not start with '-'")
	case strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") || strings.Contains(name, "//"):
		return bad("must not start or end with '/' or contain '//'")
	case strings.HasSuffix(name, ".") || strings.Contains(name, ".."):
		return bad("must not end with '.' or contain '..'")
	case strings.Contains(name, "@{"):
		return bad("must not contain '@{'")
	}
	for _, comp := range strings.Split(name, "/") {
		if strings.HasPrefix(comp, ".") || strings.HasSuffix(comp, ".lock") {
			return bad("no component may start with '.' or end with '.lock'")
		}
	}
	return nil
}

func validateGitSourceStatus(s *v1alpha1.GitSourceStatus) field.ErrorList {
	sp := field.NewPath("status")
	errs := metav1validation.ValidateConditions(s.Conditions, sp.Child("conditions"))
	errs = nonNegative(errs, sp.Child("observedGeneration"), s.ObservedGeneration)
	if len(s.History) > MaxGitHistory {
		errs = append(errs, field.TooMany(sp.Child("history"), len(s.History), MaxGitHistory))
	}
	for i, e := range s.Inventory {
		ip := sp.Child("inventory").Index(i)
		errs = requireString(errs, ip.Child("apiVersion"), e.APIVersion, nil)
		errs = requireString(errs, ip.Child("kind"), e.Kind, nil)
		errs = requireString(errs, ip.Child("name"), e.Name, nil)
	}
	return errs
}
