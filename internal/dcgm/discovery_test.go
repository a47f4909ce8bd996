package dcgm

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestEndpointSliceURLs(t *testing.T) {
	slice := func(addrType discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) discoveryv1.EndpointSlice {
		return discoveryv1.EndpointSlice{AddressType: addrType, Ports: ports, Endpoints: eps}
	}
	ep := func(ready *bool, addrs ...string) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: addrs, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
	}
	metricsPort := []discoveryv1.EndpointPort{
		{Name: ptr.To("http-other"), Port: ptr.To[int32](8080)},
		{Name: ptr.To("gpu-metrics"), Port: ptr.To[int32](9400)},
	}
	tests := []struct {
		name   string
		slices []discoveryv1.EndpointSlice
		want   []string
	}{
		{
			name: "ready and unset readiness kept, not ready dropped",
			slices: []discoveryv1.EndpointSlice{slice(discoveryv1.AddressTypeIPv4, metricsPort,
				ep(ptr.To(true), "10.0.1.5"), ep(nil, "10.0.2.5"), ep(ptr.To(false), "10.0.3.5"))},
			want: []string{"http://10.0.1.5:9400/metrics", "http://10.0.2.5:9400/metrics"},
		},
		{
			name:   "IPv6 is bracketed",
			slices: []discoveryv1.EndpointSlice{slice(discoveryv1.AddressTypeIPv6, metricsPort, ep(nil, "fd00::5"))},
			want:   []string{"http://[fd00::5]:9400/metrics"},
		},
		{
			name:   "slice without the named port skipped",
			slices: []discoveryv1.EndpointSlice{slice(discoveryv1.AddressTypeIPv4, metricsPort[:1], ep(nil, "10.0.1.5"))},
		},
		{
			name:   "FQDN slices skipped",
			slices: []discoveryv1.EndpointSlice{slice(discoveryv1.AddressTypeFQDN, metricsPort, ep(nil, "gpu.example"))},
		},
		{
			name: "duplicates across slices merged",
			slices: []discoveryv1.EndpointSlice{
				slice(discoveryv1.AddressTypeIPv4, metricsPort, ep(nil, "10.0.1.5")),
				slice(discoveryv1.AddressTypeIPv4, metricsPort, ep(nil, "10.0.1.5")),
			},
			want: []string{"http://10.0.1.5:9400/metrics"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := endpointSliceURLs(tt.slices, DefaultExporterPortName, "http", DefaultExporterPath)
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPodURLs(t *testing.T) {
	pod := func(phase corev1.PodPhase, ip string, deleting bool) corev1.Pod {
		p := corev1.Pod{Status: corev1.PodStatus{Phase: phase, PodIP: ip}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{}
		}
		return p
	}
	pods := []corev1.Pod{
		pod(corev1.PodRunning, "10.0.1.7", false),
		pod(corev1.PodPending, "10.0.1.8", false),
		pod(corev1.PodRunning, "", false),
		pod(corev1.PodRunning, "10.0.1.9", true),
		pod(corev1.PodRunning, "fd00::7", false),
	}
	got := podURLs(pods, 9400, "https", "/metrics")
	want := []string{"https://10.0.1.7:9400/metrics", "https://[fd00::7]:9400/metrics"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestDiscoveryRequiresClient(t *testing.T) {
	if _, err := (&EndpointSliceTargets{Service: "x"}).ListTargets(context.Background()); err == nil {
		t.Error("EndpointSliceTargets without a client: want an error")
	}
	if _, err := (&PodTargets{LabelSelector: "app=x"}).ListTargets(context.Background()); err == nil {
		t.Error("PodTargets without a client: want an error")
	}
}
