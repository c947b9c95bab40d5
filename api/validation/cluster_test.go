package validation

import (
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/api"
)

func TestValidateConfigMap(t *testing.T) {
	valid := func() *corev1.ConfigMap {
		return defaulted(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: "shop"}, Data: map[string]string{"app.yaml": "x: 1"}})
	}
	expectErrors(t, ValidateCreate(valid(), Options{}))

	cm := valid()
	cm.Data["bad key"] = "v"
	cm.Data["../up"] = "v"
	expectErrors(t, ValidateCreate(cm, Options{}), invalid("data[bad key]"), invalid("data[../up]"), invalid("data[../up]"))

	cm = valid()
	cm.BinaryData = map[string][]byte{"app.yaml": []byte("x")}
	expectErrors(t, ValidateCreate(cm, Options{}), invalid("binaryData[app.yaml]"))

	cm = valid()
	cm.Data["big"] = strings.Repeat("x", MaxDataSize)
	expectErrors(t, ValidateCreate(cm, Options{}), tooLong("data"))

	old := stored(valid())
	yes := true
	old.Immutable = &yes
	upd := old.DeepCopy()
	upd.Data["app.yaml"] = "x: 2"
	upd.Immutable = nil
	expectErrors(t, ValidateUpdate(upd, old, Options{}), forbidden("data"), forbidden("immutable"))
}

func TestValidateSecret(t *testing.T) {
	valid := func() *corev1.Secret {
		return defaulted(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "shop"}, StringData: map[string]string{"token": "s3cret"}})
	}
	expectErrors(t, ValidateCreate(valid(), Options{}))

	s := valid()
	s.Data["a/b"] = []byte("x")
	expectErrors(t, ValidateCreate(s, Options{}), invalid("data[a/b]"))

	s = valid()
	s.Type = corev1.SecretTypeTLS
	expectErrors(t, ValidateCreate(s, Options{}), required("data[tls.crt]"), required("data[tls.key]"))

	s = valid()
	s.Type = corev1.SecretTypeDockerConfigJson
	s.Data[corev1.DockerConfigJsonKey] = []byte("{not json")
	errs := ValidateCreate(s, Options{})
	expectErrors(t, errs, invalid("data[.dockerconfigjson]"))
	if strings.Contains(joinErrs(errs), "not json") {
		t.Errorf("error echoes the secret value: %s", joinErrs(errs))
	}

	s = valid()
	s.Type = corev1.SecretTypeBasicAuth
	expectErrors(t, ValidateCreate(s, Options{}), required("data[username]"), required("data[password]"))

	s = valid()
	s.Data["big"] = make([]byte, MaxDataSize)
	expectErrors(t, ValidateCreate(s, Options{}), tooLong("data"))

	old := stored(valid())
	upd := old.DeepCopy()
	upd.Type = corev1.SecretTypeBasicAuth
	upd.Data["username"] = []byte("u")
	expectErrors(t, ValidateUpdate(upd, old, Options{}), invalid("type"))
}

func TestValidateNamespace(t *testing.T) {
	ns := defaulted(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop-berlin"}})
	expectErrors(t, ValidateCreate(ns, Options{}))

	bad := ns.DeepCopy()
	bad.Name = "shop.berlin"
	expectErrors(t, ValidateCreate(bad, Options{}), invalid("metadata.name"))

	bad = ns.DeepCopy()
	bad.Namespace = "default"
	expectErrors(t, ValidateCreate(bad, Options{}), forbidden("metadata.namespace"))

	old := stored(ns.DeepCopy())
	st := old.DeepCopy()
	st.Status.Phase = "Deleted"
	expectErrors(t, ValidateStatusUpdate(st, old), notSupported("status.phase"))
}

func validNode() *corev1.Node {
	return defaulted(&corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "shop-berlin-1", Labels: map[string]string{"kubernetes.io/hostname": "shop-berlin-1"}},
		Spec:       corev1.NodeSpec{PodCIDR: "10.42.3.0/24"},
		Status: corev1.NodeStatus{
			Capacity:  corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourcePods: resource.MustParse("110")},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.1.20"}},
		},
	})
}

func TestValidateNode(t *testing.T) {
	expectErrors(t, ValidateCreate(validNode(), Options{}))

	n := validNode()
	n.Spec.PodCIDR, n.Spec.PodCIDRs = "10.42.3.1/24", []string{"10.42.3.1/24"}
	n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "pos", Effect: "Sometimes"}, {Key: "", Effect: corev1.TaintEffectNoSchedule}}
	n.Status.Addresses[0].Address = "192.168.1"
	expectErrors(t, ValidateCreate(n, Options{}),
		invalid("spec.podCIDRs[0]"), notSupported("spec.taints[0].effect"), required("spec.taints[1].key"), invalid("status.addresses[0].address"))

	n = validNode()
	n.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoExecute}, {Key: "k", Value: "v", Effect: corev1.TaintEffectNoExecute}}
	expectErrors(t, ValidateCreate(n, Options{}), duplicate("spec.taints[1].effect"))

	old := stored(validNode())
	upd := old.DeepCopy()
	upd.Spec.PodCIDR, upd.Spec.PodCIDRs = "10.42.4.0/24", []string{"10.42.4.0/24"}
	upd.Spec.Unschedulable = true
	expectErrors(t, ValidateUpdate(upd, old, Options{}), forbidden("spec.podCIDRs"))

	noCIDR := stored(defaulted(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}))
	assigned := noCIDR.DeepCopy()
	assigned.Spec.PodCIDR, assigned.Spec.PodCIDRs = "10.42.5.0/24", []string{"10.42.5.0/24"}
	expectErrors(t, ValidateUpdate(assigned, noCIDR, Options{}))

	st := old.DeepCopy()
	st.Status.Capacity[corev1.ResourceMemory] = resource.MustParse("-1Gi")
	expectErrors(t, ValidateStatusUpdate(st, old), invalid("status.capacity[memory]"))

	// The fleet-wide slices' site is no zone.
	n = validNode()
	n.Labels = map[string]string{api.LabelZone: api.SiteFleet}
	expectErrors(t, ValidateCreate(n, Options{}), invalid("metadata.labels[topology.kubernetes.io/zone]"))
	upd = old.DeepCopy()
	upd.Labels = map[string]string{api.LabelZone: api.SiteFleet}
	expectErrors(t, ValidateUpdate(upd, old, Options{}), invalid("metadata.labels[topology.kubernetes.io/zone]"))
}

func TestValidateEvent(t *testing.T) {
	podEvent := func() *corev1.Event {
		return &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: "web.17a8b2c3d4e5f6a7", Namespace: "shop"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "web"},
			Reason:         "Pulled", Message: "image pulled", Type: corev1.EventTypeNormal,
		}
	}
	expectErrors(t, ValidateCreate(podEvent(), Options{}))

	e := podEvent()
	e.InvolvedObject.Namespace = "other"
	expectErrors(t, ValidateCreate(e, Options{}), invalid("involvedObject.namespace"))

	e = podEvent()
	e.InvolvedObject = corev1.ObjectReference{}
	expectErrors(t, ValidateCreate(e, Options{}), required("involvedObject.kind"), required("involvedObject.name"), invalid("involvedObject.namespace"))

	// Events about cluster-scoped objects live in "default".
	e = podEvent()
	e.Namespace = "default"
	e.InvolvedObject = corev1.ObjectReference{Kind: "Node", Name: "shop-berlin-1"}
	expectErrors(t, ValidateCreate(e, Options{}))

	// Events with an eventTime follow the events API rules.
	e = podEvent()
	e.EventTime = metav1.NewMicroTime(time.Now())
	e.Type = "Info"
	expectErrors(t, ValidateCreate(e, Options{}), required("reportingComponent"), required("reportingInstance"), required("action"), notSupported("type"))
	e.ReportingController, e.ReportingInstance, e.Action, e.Type = "flotilla.dev/agent", "shop-berlin-1", "Pulling", corev1.EventTypeNormal
	expectErrors(t, ValidateCreate(e, Options{}))
}

func TestValidateLease(t *testing.T) {
	secs := int32(40)
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "shop-berlin-1", Namespace: "kube-node-lease"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: new("shop-berlin-1"), LeaseDurationSeconds: &secs},
	}
	expectErrors(t, ValidateCreate(l, Options{}))
	zero, neg := int32(0), int32(-1)
	l.Spec.LeaseDurationSeconds, l.Spec.LeaseTransitions = &zero, &neg
	expectErrors(t, ValidateCreate(l, Options{}), invalid("spec.leaseDurationSeconds"), invalid("spec.leaseTransitions"))
}

func validSlice() *discoveryv1.EndpointSlice {
	return defaulted(&discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-abc12", Namespace: "shop", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.42.3.7"}, NodeName: new("shop-berlin-1")}},
		Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(8080))}},
	})
}

func TestValidateEndpointSlice(t *testing.T) {
	expectErrors(t, ValidateCreate(validSlice(), Options{}))

	es := validSlice()
	es.AddressType = ""
	expectErrors(t, ValidateCreate(es, Options{}), required("addressType"))

	es = validSlice()
	es.AddressType = "IPX"
	expectErrors(t, ValidateCreate(es, Options{}), notSupported("addressType"))

	es = validSlice()
	es.Endpoints = append(es.Endpoints,
		discoveryv1.Endpoint{Addresses: []string{"10.42.3.300"}},
		discoveryv1.Endpoint{Addresses: []string{"fd00::1"}},
		discoveryv1.Endpoint{},
	)
	es.Ports = append(es.Ports, discoveryv1.EndpointPort{Name: new("http"), Port: new(int32(0)), Protocol: new(corev1.ProtocolTCP)})
	expectErrors(t, ValidateCreate(es, Options{}),
		invalid("endpoints[1].addresses[0]"), invalid("endpoints[2].addresses[0]"), required("endpoints[3].addresses"),
		duplicate("ports[1].name"), invalid("ports[1].port"))

	es = validSlice()
	for i := 0; i < maxEndpoints; i++ {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.42.%d.%d", i/250, i%250+1)}})
	}
	expectErrors(t, ValidateCreate(es, Options{}), tooMany("endpoints"))

	old := stored(validSlice())
	upd := old.DeepCopy()
	upd.AddressType = discoveryv1.AddressTypeIPv6
	upd.Endpoints[0].Addresses = []string{"fd00::7"}
	expectErrors(t, ValidateUpdate(upd, old, Options{}), invalid("addressType"))
}

func TestStatusUpdateOfKindWithoutStatus(t *testing.T) {
	old := stored(defaulted(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: "shop"}}))
	expectErrors(t, ValidateStatusUpdate(old.DeepCopy(), old), internal("status"))
}
