package deploy

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/schedloop/schedloop/internal/podgroup"
)

// manifestFiles are the Kubernetes manifests this directory ships.
func manifestFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"kubernetes/*.yaml", "crds/*.yaml", "examples/*.yaml", "profile-configmap.yaml"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 8 {
		t.Fatalf("found only %v", files)
	}
	return files
}

// decoded is every object of the manifests, decoded strictly.
type decoded struct {
	file string
	obj  runtime.Object
}

func decodeAll(t *testing.T) []decoded {
	t.Helper()
	s := runtime.NewScheme()
	if err := scheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	dec := serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
	var out []decoded
	for _, f := range manifestFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufioReader(data))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if err != nil {
				break
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			var meta struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			if meta.APIVersion == podgroup.Group+"/"+podgroup.Version {
				var pg podgroup.PodGroup
				if err := yaml.UnmarshalStrict(doc, &pg); err != nil {
					t.Errorf("%s document %d (PodGroup): %v", f, i, err)
				}
				out = append(out, decoded{f, nil})
				continue
			}
			obj, _, err := dec.Decode(doc, nil, nil)
			if err != nil {
				t.Errorf("%s document %d (%s %s): %v", f, i, meta.APIVersion, meta.Kind, err)
				continue
			}
			out = append(out, decoded{f, obj})
		}
	}
	return out
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, l := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.Bytes()
}

// TestManifestsDecode decodes every manifest with client-go's scheme (and
// apiextensions for the CRD) in strict mode: an unknown or misspelt field
// fails here rather than at kubectl apply.
func TestManifestsDecode(t *testing.T) {
	objs := decodeAll(t)
	kinds := map[string]int{}
	for _, d := range objs {
		if d.obj == nil {
			kinds["PodGroup"]++
			continue
		}
		kinds[reflect.TypeOf(d.obj).Elem().Name()]++
	}
	for _, k := range []string{"Namespace", "ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding",
		"Deployment", "Service", "ConfigMap", "Secret", "CustomResourceDefinition", "PodGroup", "Pod"} {
		if kinds[k] == 0 {
			t.Errorf("no %s among the manifests (have %v)", k, kinds)
		}
	}
	for _, d := range objs {
		if dep, ok := d.obj.(*appsv1.Deployment); ok {
			checkPodSecurity(t, dep)
		}
	}
}

// checkPodSecurity: the namespace enforces the restricted Pod Security level.
func checkPodSecurity(t *testing.T, d *appsv1.Deployment) {
	spec := d.Spec.Template.Spec
	if spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot {
		t.Errorf("deployment %s: pod does not set runAsNonRoot", d.Name)
	}
	if spec.ServiceAccountName == "" {
		t.Errorf("deployment %s: no service account of its own", d.Name)
	}
	for _, c := range spec.Containers {
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, corev1.Capability("ALL")) {
			t.Errorf("deployment %s container %s: must drop ALL capabilities and forbid privilege escalation", d.Name, c.Name)
		}
	}
}

// TestCRDIsTheOneTheHarnessInstalls: deploy/crds and internal/podgroup must
// not drift apart.
func TestCRDIsTheOneTheHarnessInstalls(t *testing.T) {
	shipped, err := os.ReadFile("crds/scheduling.x-k8s.io_podgroups.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(shipped, podgroup.CRDYAML()) {
		t.Fatal("deploy/crds/scheduling.x-k8s.io_podgroups.yaml differs from internal/podgroup/crd.yaml: copy it over")
	}
}

// TestKustomizationListsEveryManifest: a manifest left out of
// kustomization.yaml would silently not be applied.
func TestKustomizationListsEveryManifest(t *testing.T) {
	data, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct{ Resources []string }
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	for _, f := range manifestFiles(t) {
		if strings.HasPrefix(f, "examples/") {
			continue
		}
		if !slices.Contains(k.Resources, f) {
			t.Errorf("kustomization.yaml does not list %s", f)
		}
	}
	for _, r := range k.Resources {
		if _, err := os.Stat(r); err != nil {
			t.Errorf("kustomization.yaml lists %s: %v", r, err)
		}
	}
}

// TestSchedulerConfigsKeepTheShippedProfiles: the in-cluster and compose
// configurations differ from scheduler-config.yaml only in connection and
// leader election, never in plugins.
func TestSchedulerConfigsKeepTheShippedProfiles(t *testing.T) {
	var shipped map[string]any
	if err := yaml.Unmarshal([]byte(SchedulerConfig), &shipped); err != nil {
		t.Fatal(err)
	}
	inCluster := ""
	for _, d := range decodeAll(t) {
		if cm, ok := d.obj.(*corev1.ConfigMap); ok && cm.Name == "schedloop-scheduler-config" {
			inCluster = cm.Data["config.yaml"]
		}
	}
	compose, err := os.ReadFile("compose/scheduler-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]string{"kubernetes/scheduler.yaml": inCluster, "compose/scheduler-config.yaml": string(compose)} {
		var got map[string]any
		if err := yaml.UnmarshalStrict([]byte(cfg), &got); err != nil || got == nil {
			t.Errorf("%s: scheduler config: %v", name, err)
			continue
		}
		if !reflect.DeepEqual(got["profiles"], shipped["profiles"]) {
			t.Errorf("%s: profiles differ from deploy/scheduler-config.yaml", name)
		}
		if got["apiVersion"] != shipped["apiVersion"] || got["kind"] != shipped["kind"] {
			t.Errorf("%s: %v %v, want %v %v", name, got["apiVersion"], got["kind"], shipped["apiVersion"], shipped["kind"])
		}
		le, _ := got["leaderElection"].(map[string]any)
		if le["leaderElect"] != true || le["resourceName"] != "schedloop-scheduler" {
			t.Errorf("%s: leaderElection %v, want leader election on the schedloop-scheduler Lease", name, le)
		}
	}
}

// need is one API call a component makes.
type need struct {
	group, resource, verb, namespace, name string
}

// TestRBACCoversWhatEachComponentCalls checks each ServiceAccount's bound
// rules against the calls its code makes, and that nothing is granted
// wholesale.
func TestRBACCoversWhatEachComponentCalls(t *testing.T) {
	objs := decodeAll(t)
	needs := map[string][]need{
		// events.Watcher informers (both PodGroup APIs, Workloads, Kueue's Workloads and ClusterQueues,
		// DRA slices and claims); dcgm EndpointSlice and pod discovery; the schedloop.io/eta annotation
		// patched onto waiting pods; leader election (-leader-elect) on its own Lease.
		"schedloop-collector": {
			{"", "pods", "list", "", ""}, {"", "pods", "watch", "", ""}, {"", "pods", "patch", "default", "x"},
			{"kueue.x-k8s.io", "workloads", "list", "", ""}, {"kueue.x-k8s.io", "workloads", "watch", "", ""},
			{"kueue.x-k8s.io", "clusterqueues", "list", "", ""}, {"kueue.x-k8s.io", "clusterqueues", "watch", "", ""},
			{"resource.k8s.io", "resourceslices", "list", "", ""}, {"resource.k8s.io", "resourceslices", "watch", "", ""},
			{"resource.k8s.io", "resourceclaims", "list", "", ""}, {"resource.k8s.io", "resourceclaims", "watch", "", ""},
			{"", "events", "list", "", ""}, {"", "events", "watch", "", ""},
			{"", "nodes", "list", "", ""}, {"", "nodes", "watch", "", ""},
			{"scheduling.x-k8s.io", "podgroups", "list", "", ""}, {"scheduling.x-k8s.io", "podgroups", "watch", "", ""},
			{"scheduling.k8s.io", "podgroups", "list", "", ""}, {"scheduling.k8s.io", "podgroups", "watch", "", ""},
			{"scheduling.k8s.io", "workloads", "list", "", ""}, {"scheduling.k8s.io", "workloads", "watch", "", ""},
			{"discovery.k8s.io", "endpointslices", "list", "gpu-operator", ""},
			{"", "pods", "list", "gpu-operator", ""},
			{"coordination.k8s.io", "leases", "create", "schedloop-system", ""},
			{"coordination.k8s.io", "leases", "get", "schedloop-system", "schedloop-collector"},
			{"coordination.k8s.io", "leases", "update", "schedloop-system", "schedloop-collector"},
		},
		// gang manager (PodGroup informer, status updates, the Workload
		// informer behind inherited metadata), profile watcher
		// (one ConfigMap), leader election on its own Lease, GPU devices
		// recorded on pods (SchedloopTopology's PreBind).
		"schedloop-scheduler": {
			{"", "pods", "patch", "default", "x"},
			{"scheduling.x-k8s.io", "podgroups", "get", "default", "x"}, {"scheduling.x-k8s.io", "podgroups", "list", "", ""},
			{"scheduling.x-k8s.io", "podgroups", "watch", "", ""}, {"scheduling.x-k8s.io", "podgroups/status", "update", "default", "x"},
			{"scheduling.k8s.io", "workloads", "list", "", ""}, {"scheduling.k8s.io", "workloads", "watch", "", ""},
			{"", "configmaps", "get", "kube-system", "schedloop-profile"}, {"", "configmaps", "list", "kube-system", "schedloop-profile"},
			{"", "configmaps", "watch", "kube-system", "schedloop-profile"},
			{"coordination.k8s.io", "leases", "create", "schedloop-system", ""},
			{"coordination.k8s.io", "leases", "get", "schedloop-system", "schedloop-scheduler"},
			{"coordination.k8s.io", "leases", "update", "schedloop-system", "schedloop-scheduler"},
		},
		// publish.ConfigMap (get, update of the shipped ConfigMap) and
		// publish.LeaderElected.
		"schedloop-tuner": {
			{"", "configmaps", "get", "kube-system", "schedloop-profile"}, {"", "configmaps", "update", "kube-system", "schedloop-profile"},
			{"coordination.k8s.io", "leases", "create", "schedloop-system", ""},
			{"coordination.k8s.io", "leases", "get", "schedloop-system", "schedloop-tuner"},
			{"coordination.k8s.io", "leases", "update", "schedloop-system", "schedloop-tuner"},
		},
	}
	roles := map[string][]rbacv1.PolicyRule{} // "namespace/name" ("/name" for cluster roles)
	for _, d := range objs {
		switch o := d.obj.(type) {
		case *rbacv1.ClusterRole:
			roles["/"+o.Name] = o.Rules
		case *rbacv1.Role:
			roles[o.Namespace+"/"+o.Name] = o.Rules
		}
	}
	for key, rules := range roles {
		for _, r := range rules {
			if slices.Contains(r.Verbs, "*") || slices.Contains(r.Resources, "*") || slices.Contains(r.APIGroups, "*") {
				t.Errorf("role %s grants a wildcard: %+v", key, r)
			}
			if slices.Contains(r.Resources, "secrets") {
				t.Errorf("role %s grants secrets", key)
			}
		}
	}
	type grant struct {
		rules     []rbacv1.PolicyRule
		namespace string // "" for cluster-wide
	}
	grants := map[string][]grant{}
	systemRoles := map[string][]string{}
	for _, d := range objs {
		var subjects []rbacv1.Subject
		var ref rbacv1.RoleRef
		ns := ""
		switch o := d.obj.(type) {
		case *rbacv1.ClusterRoleBinding:
			subjects, ref = o.Subjects, o.RoleRef
		case *rbacv1.RoleBinding:
			subjects, ref, ns = o.Subjects, o.RoleRef, o.Namespace
		default:
			continue
		}
		for _, s := range subjects {
			if s.Kind != "ServiceAccount" || s.Namespace != "schedloop-system" {
				t.Errorf("binding to %s %s/%s: only schedloop-system service accounts are bound", s.Kind, s.Namespace, s.Name)
			}
			key := "/" + ref.Name
			if ref.Kind == "Role" {
				key = ns + "/" + ref.Name
			}
			rules, ok := roles[key]
			if !ok {
				systemRoles[s.Name] = append(systemRoles[s.Name], ref.Name)
				continue
			}
			grants[s.Name] = append(grants[s.Name], grant{rules, ns})
		}
	}
	for sa, ns := range needs {
		for _, n := range ns {
			ok := false
			for _, g := range grants[sa] {
				if g.namespace != "" && g.namespace != n.namespace {
					continue
				}
				for _, r := range g.rules {
					if covers(r, n) {
						ok = true
					}
				}
			}
			if !ok {
				t.Errorf("%s may not %s %s %q in namespace %q (name %q)", sa, n.verb, n.resource, n.group, n.namespace, n.name)
			}
		}
	}
	// Nor more: a verb no call needs is a grant an attacker holding the
	// token would get for free.
	for sa, gs := range grants {
		for _, g := range gs {
			for _, r := range g.rules {
				for _, group := range r.APIGroups {
					for _, res := range r.Resources {
						for _, verb := range r.Verbs {
							if !slices.ContainsFunc(needs[sa], func(n need) bool {
								return n.group == group && n.resource == res && n.verb == verb
							}) {
								t.Errorf("%s is granted %s on %s %q, which no call of its code needs", sa, verb, res, group)
							}
						}
					}
				}
			}
		}
	}
	for _, want := range []string{"system:kube-scheduler", "system:volume-scheduler", "extension-apiserver-authentication-reader"} {
		if !slices.Contains(systemRoles["schedloop-scheduler"], want) {
			t.Errorf("schedloop-scheduler is not bound to %s", want)
		}
	}
	if len(systemRoles["schedloop-collector"])+len(systemRoles["schedloop-tuner"]) > 0 {
		t.Errorf("collector or tuner bound to built-in roles: %v", systemRoles)
	}
}

func covers(r rbacv1.PolicyRule, n need) bool {
	if !slices.Contains(r.APIGroups, n.group) || !slices.Contains(r.Resources, n.resource) || !slices.Contains(r.Verbs, n.verb) {
		return false
	}
	return len(r.ResourceNames) == 0 || (n.name != "" && slices.Contains(r.ResourceNames, n.name))
}

// TestSecureByDefault: the collector's API takes its token from a Secret the
// manifests ship, and NetworkPolicies deny ingress to schedloop's pods but
// for the collector's port.
func TestSecureByDefault(t *testing.T) {
	var secrets []string
	var collector *appsv1.Deployment
	var policies []*networkingv1.NetworkPolicy
	for _, d := range decodeAll(t) {
		switch o := d.obj.(type) {
		case *corev1.Secret:
			secrets = append(secrets, o.Name)
		case *appsv1.Deployment:
			if o.Name == "schedloop-collector" {
				collector = o
			}
		case *networkingv1.NetworkPolicy:
			policies = append(policies, o)
		}
	}
	if collector == nil {
		t.Fatal("no collector Deployment")
	}
	token := ""
	for _, e := range collector.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "SCHEDLOOP_API_TOKEN" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			token = e.ValueFrom.SecretKeyRef.Name
		}
	}
	if token == "" || !slices.Contains(secrets, token) {
		t.Errorf("collector's SCHEDLOOP_API_TOKEN comes from Secret %q; shipped Secrets: %v", token, secrets)
	}
	denyAll, collectorOnly := false, false
	for _, p := range policies {
		if p.Namespace != "schedloop-system" {
			continue
		}
		if len(p.Spec.PodSelector.MatchLabels) == 0 && len(p.Spec.Ingress) == 0 && slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
			denyAll = true
		}
		if p.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"] == "schedloop-collector" {
			for _, in := range p.Spec.Ingress {
				for _, port := range in.Ports {
					if port.Port != nil && port.Port.IntValue() == 8080 {
						collectorOnly = true
					}
				}
			}
		}
	}
	if !denyAll || !collectorOnly {
		t.Errorf("NetworkPolicies: default deny %v, collector port 8080 allowed %v; want both", denyAll, collectorOnly)
	}
}

// TestCollectorReplicasElectALeader: more than one collector replica stores
// every sample once only under -leader-elect, with the Lease's namespace and
// each replica's name from the downward API (the flags' defaults read them).
func TestCollectorReplicasElectALeader(t *testing.T) {
	for _, d := range decodeAll(t) {
		o, ok := d.obj.(*appsv1.Deployment)
		if !ok || o.Name != "schedloop-collector" {
			continue
		}
		if o.Spec.Replicas == nil || *o.Spec.Replicas < 2 {
			t.Errorf("collector replicas %v, want at least 2", o.Spec.Replicas)
		}
		c := o.Spec.Template.Spec.Containers[0]
		if !slices.Contains(c.Args, "-leader-elect") {
			t.Errorf("collector args %v: %v replicas without -leader-elect would each scrape", c.Args, *o.Spec.Replicas)
		}
		fields := map[string]string{}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				fields[e.Name] = e.ValueFrom.FieldRef.FieldPath
			}
		}
		if fields["POD_NAME"] != "metadata.name" || fields["POD_NAMESPACE"] != "metadata.namespace" {
			t.Errorf("collector env from fields %v, want POD_NAME=metadata.name and POD_NAMESPACE=metadata.namespace", fields)
		}
		return
	}
	t.Fatal("no collector Deployment")
}
