package apiserver

import (
	"strings"

	"flotilla.dev/flotilla/api"
)

// Store keys are /<group or "core">/<resource>/<namespace>/<name> for
// namespaced objects and /<group or "core">/<resource>/<name> otherwise, so
// that a resource, or a resource in one namespace, is one key prefix.

func groupSegment(res *api.Resource) string {
	if res.GVR.Group == "" {
		return "core"
	}
	return res.GVR.Group
}

func resourcePrefix(res *api.Resource) string {
	return "/" + groupSegment(res) + "/" + res.GVR.Resource + "/"
}

func objectKey(res *api.Resource, namespace, name string) string {
	if res.Namespaced {
		return resourcePrefix(res) + namespace + "/" + name
	}
	return resourcePrefix(res) + name
}

var resourceByPrefix = func() map[string]*api.Resource {
	m := map[string]*api.Resource{}
	for _, r := range api.Resources() {
		m[groupSegment(r)+"/"+r.GVR.Resource] = r
	}
	return m
}()

// parseKey splits a store key into its resource, namespace and name.
func parseKey(key string) (res *api.Resource, namespace, name string, ok bool) {
	parts := strings.Split(strings.TrimPrefix(key, "/"), "/")
	if len(parts) < 3 {
		return nil, "", "", false
	}
	res, ok = resourceByPrefix[parts[0]+"/"+parts[1]]
	if !ok {
		return nil, "", "", false
	}
	if res.Namespaced {
		if len(parts) != 4 {
			return nil, "", "", false
		}
		return res, parts[2], parts[3], true
	}
	if len(parts) != 3 {
		return nil, "", "", false
	}
	return res, "", parts[2], true
}

// cacheKey is the key of an object inside one resource's cache map.
func cacheKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}
