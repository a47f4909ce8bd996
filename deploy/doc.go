// Package deploy holds what a platform team applies to a real cluster:
// Kubernetes manifests, the scheduler configuration, the PodGroup CRD and a
// Grafana dashboard. The Go code here embeds the scheduler configuration for
// in-process use (the demo) and tests the artefacts: manifests decode with
// client-go's scheme, RBAC covers what each component calls, dashboard
// queries run against the schema.
package deploy
