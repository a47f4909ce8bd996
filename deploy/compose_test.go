package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// composeFile is the part of the Compose specification this test checks.
type composeFile struct {
	Name     string
	Services map[string]struct {
		Image string
		Build *struct {
			Context string
			Args    map[string]string
		}
		Command     []string
		Environment map[string]string
		Volumes     []any
		Ports       []string
		DependsOn   map[string]struct{ Condition string } `json:"depends_on"`
		Healthcheck *struct {
			Test     []string
			Interval string
		}
	}
	Volumes map[string]any
}

// TestComposeFileIsComplete stands in for `docker compose config`, which
// needs the compose plugin: the file parses strictly as YAML, and each
// service has what it needs to start and report health.
func TestComposeFileIsComplete(t *testing.T) {
	data, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for _, name := range []string{"postgres", "collector", "tuner", "scheduler"} {
		s, ok := c.Services[name]
		if !ok {
			t.Errorf("no service %s", name)
			continue
		}
		if s.Healthcheck == nil || len(s.Healthcheck.Test) < 2 || s.Healthcheck.Test[0] != "CMD" {
			t.Errorf("%s: want an exec-form health check (the images have no shell)", name)
		}
		if name == "postgres" {
			continue
		}
		if s.Build == nil || s.Build.Args["CMD"] != name || s.Image == "" {
			t.Errorf("%s: want build args CMD=%s and an image name", name, name)
		}
		// The health check runs a binary the Dockerfile puts in the image.
		if bin := s.Healthcheck.Test[1]; bin != "/usr/local/bin/probe" && bin != "/usr/local/bin/app" {
			t.Errorf("%s: health check runs %s, which the image does not have", name, bin)
		}
		mounted := false
		for _, v := range s.Volumes {
			if m, ok := v.(map[string]any); ok && m["target"] == "/etc/schedloop/kubeconfig" && m["read_only"] == true {
				mounted = true
			}
		}
		if !mounted {
			t.Errorf("%s: the kubeconfig is not mounted read-only at /etc/schedloop/kubeconfig", name)
		}
		if name != "scheduler" && !strings.Contains(s.Environment["DATABASE_URL"], "@postgres:5432/") {
			t.Errorf("%s: DATABASE_URL %q does not point at the postgres service", name, s.Environment["DATABASE_URL"])
		}
		for dep, d := range s.DependsOn {
			if _, ok := c.Services[dep]; !ok || d.Condition != "service_healthy" {
				t.Errorf("%s: depends on %s (%s), want an existing service, healthy", name, dep, d.Condition)
			}
		}
		for _, v := range s.Volumes {
			m, ok := v.(map[string]any)
			if !ok || m["type"] != "bind" || m["source"] == nil {
				continue
			}
			src, _ := m["source"].(string)
			if strings.HasPrefix(src, "./") {
				if _, err := os.Stat(filepath.Join("..", src)); err != nil {
					t.Errorf("%s: mounts %s: %v", name, src, err)
				}
			}
		}
	}
	if !slices.Contains(c.Services["collector"].Ports, "127.0.0.1:8080:8080") {
		t.Errorf("collector: ports %v, want the dashboard's 8080 published on the loopback only", c.Services["collector"].Ports)
	}
	for name, svc := range c.Services {
		for _, p := range svc.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s: port %s is published on every interface", name, p)
			}
		}
	}
	if c.Services["tuner"].DependsOn["collector"].Condition != "service_healthy" {
		t.Error("tuner: must wait for the collector, which applies the schema")
	}
	for _, v := range []string{"pgdata", "spool"} {
		if _, ok := c.Volumes[v]; !ok {
			t.Errorf("volume %s not declared", v)
		}
	}
}

// TestDockerfileBuildsEachCommand: the image the compose file and the
// manifests name must be buildable from the one Dockerfile.
func TestDockerfileBuildsEachCommand(t *testing.T) {
	data, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(data)
	for _, want := range []string{
		"ARG CMD", "collector|tuner|scheduler", "./cmd/${CMD}", "./deploy/probe",
		"k8s.io/component-base/version.gitVersion=${K8S_VERSION}", "CGO_ENABLED=1",
		"FROM gcr.io/distroless/base-debian12:nonroot", "USER nonroot:nonroot",
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mk), "K8S_VERSION := v1.37.2") || !strings.Contains(df, "ARG K8S_VERSION=v1.37.2") {
		t.Error("the Dockerfile's K8S_VERSION must match the Makefile's")
	}
}
