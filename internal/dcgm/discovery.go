package dcgm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Defaults that match the NVIDIA GPU Operator's dcgm-exporter Service
// ("nvidia-dcgm-exporter", port "gpu-metrics" 9400, path /metrics).
const (
	DefaultExporterPortName = "gpu-metrics"
	DefaultExporterPort     = 9400
	DefaultExporterPath     = "/metrics"
)

// EndpointSliceTargets lists the ready endpoints of the dcgm-exporter Service.
// It reads EndpointSlices rather than pods so that the Service's port
// mapping and readiness are honoured.
type EndpointSliceTargets struct {
	Client    kubernetes.Interface
	Namespace string
	Service   string
	// PortName, Scheme and Path default to "gpu-metrics", "http", "/metrics".
	PortName string
	Scheme   string
	Path     string
}

// ListTargets implements TargetLister.
func (e *EndpointSliceTargets) ListTargets(ctx context.Context) ([]string, error) {
	if e.Client == nil || e.Service == "" {
		return nil, errors.New("endpointslice discovery: Client and Service are required")
	}
	list, err := e.Client.DiscoveryV1().EndpointSlices(e.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + e.Service,
	})
	if err != nil {
		return nil, fmt.Errorf("list EndpointSlices of service %s/%s: %w", e.Namespace, e.Service, err)
	}
	return endpointSliceURLs(list.Items, orDefault(e.PortName, DefaultExporterPortName), orDefault(e.Scheme, "http"), orDefault(e.Path, DefaultExporterPath)), nil
}

// PodTargets lists running dcgm-exporter pods by label selector, for
// installations without a Service (a bare DaemonSet).
type PodTargets struct {
	Client        kubernetes.Interface
	Namespace     string
	LabelSelector string
	// Port, Scheme and Path default to 9400, "http", "/metrics".
	Port   int
	Scheme string
	Path   string
}

// ListTargets implements TargetLister.
func (p *PodTargets) ListTargets(ctx context.Context) ([]string, error) {
	if p.Client == nil || p.LabelSelector == "" {
		return nil, errors.New("pod discovery: Client and LabelSelector are required")
	}
	list, err := p.Client.CoreV1().Pods(p.Namespace).List(ctx, metav1.ListOptions{LabelSelector: p.LabelSelector})
	if err != nil {
		return nil, fmt.Errorf("list pods %q in namespace %q: %w", p.LabelSelector, p.Namespace, err)
	}
	port := p.Port
	if port <= 0 {
		port = DefaultExporterPort
	}
	return podURLs(list.Items, port, orDefault(p.Scheme, "http"), orDefault(p.Path, DefaultExporterPath)), nil
}

// endpointSliceURLs builds one URL per ready address serving portName. An
// endpoint whose Ready condition is unset counts as ready, as the
// EndpointSlice API specifies.
func endpointSliceURLs(eps []discoveryv1.EndpointSlice, portName, scheme, path string) []string {
	var urls []string
	for _, s := range eps {
		if s.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		var port int32
		for _, p := range s.Ports {
			if p.Name != nil && *p.Name == portName && p.Port != nil {
				port = *p.Port
			}
		}
		if port == 0 {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, addr := range ep.Addresses {
				urls = append(urls, buildURL(scheme, addr, int(port), path))
			}
		}
	}
	slices.Sort(urls)
	return slices.Compact(urls)
}

// podURLs builds one URL per running pod that has an IP.
func podURLs(pods []corev1.Pod, port int, scheme, path string) []string {
	var urls []string
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		urls = append(urls, buildURL(scheme, p.Status.PodIP, port, path))
	}
	slices.Sort(urls)
	return slices.Compact(urls)
}

func buildURL(scheme, host string, port int, path string) string {
	u := url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(port)), Path: path}
	return u.String()
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
