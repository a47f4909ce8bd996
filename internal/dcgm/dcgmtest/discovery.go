// Package dcgmtest holds the checks of internal/dcgm that need a real
// kube-apiserver. They are exported so the cluster test harness, which starts
// one in-process, can run them; this package starts nothing itself and must
// not be imported by production code.
package dcgmtest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/schedloop/schedloop/internal/dcgm"
)

// RunDiscoveryIntegration checks EndpointSliceTargets and PodTargets against
// the apiserver behind client. It creates its objects in a fresh namespace
// and deletes the namespace when the test ends. No controllers need to run:
// the EndpointSlice and the pods' status are written directly.
func RunDiscoveryIntegration(t *testing.T, client kubernetes.Interface) {
	t.Helper()
	ctx := t.Context()
	ns := fmt.Sprintf("dcgm-discovery-%d", time.Now().UnixNano())
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", ns, err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().Namespaces().Delete(t.Context(), ns, metav1.DeleteOptions{})
	})

	const service = "nvidia-dcgm-exporter"
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:   service + "-abcde",
			Labels: map[string]string{discoveryv1.LabelServiceName: service},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(dcgm.DefaultExporterPortName), Port: ptr.To[int32](dcgm.DefaultExporterPort)}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.0.1.5"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
			{Addresses: []string{"10.0.2.5"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
		},
	}
	if _, err := client.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create EndpointSlice: %v", err)
	}
	// A slice of another service must not be picked up.
	other := slice.DeepCopy()
	other.Name, other.Labels = "other-xyz", map[string]string{discoveryv1.LabelServiceName: "other"}
	if _, err := client.DiscoveryV1().EndpointSlices(ns).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create EndpointSlice: %v", err)
	}

	for i, phase := range []corev1.PodPhase{corev1.PodRunning, corev1.PodPending} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("dcgm-exporter-%d", i), Labels: map[string]string{"app": service}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "exporter", Image: "nvcr.io/nvidia/k8s/dcgm-exporter"}}},
		}
		created, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create pod %s: %v", pod.Name, err)
		}
		ip := fmt.Sprintf("10.0.%d.7", i+1)
		created.Status.Phase = phase
		created.Status.PodIP = ip
		created.Status.PodIPs = []corev1.PodIP{{IP: ip}}
		if _, err := client.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("set status of pod %s: %v", pod.Name, err)
		}
	}

	got, err := (&dcgm.EndpointSliceTargets{Client: client, Namespace: ns, Service: service}).ListTargets(ctx)
	if err != nil {
		t.Fatalf("EndpointSliceTargets: %v", err)
	}
	if want := []string{"http://10.0.1.5:9400/metrics"}; !slices.Equal(got, want) {
		t.Errorf("EndpointSliceTargets = %v, want %v", got, want)
	}

	got, err = (&dcgm.PodTargets{Client: client, Namespace: ns, LabelSelector: "app=" + service}).ListTargets(ctx)
	if err != nil {
		t.Fatalf("PodTargets: %v", err)
	}
	if want := []string{"http://10.0.1.7:9400/metrics"}; !slices.Equal(got, want) {
		t.Errorf("PodTargets = %v, want %v", got, want)
	}
}
