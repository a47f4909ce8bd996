// Package deploy holds what a platform team applies to a real cluster:
// Kubernetes manifests, the scheduler configuration, the PodGroup CRD and a
// Grafana dashboard. The Go files here only test those artefacts (manifests
// decode with client-go's scheme, dashboard queries run against the schema).
package deploy
