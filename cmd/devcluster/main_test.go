package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func TestRunReplaysAndExits(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kc")
	var out, errOut bytes.Buffer
	err := run(t.Context(), []string{
		"-nodes", "4", "-jobs", "6", "-speed", "3000", "-exit-when-done",
		"-dir", filepath.Join(dir, "data"), "-kubeconfig", kubeconfig,
	}, &out, &errOut)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "6 of 6 jobs ended") {
		t.Fatalf("output:\n%s", out.String())
	}
	if _, err := os.Stat(kubeconfig); err != nil {
		t.Fatalf("kubeconfig not written: %v", err)
	}
	if _, err := clientcmd.LoadFromFile(kubeconfig); err != nil {
		t.Fatalf("kubeconfig unreadable: %v", err)
	}
}

// The legacy PodGroup CRD keeps replaying.
func TestRunReplaysPodGroupCRDGangs(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	err := run(t.Context(), []string{
		"-nodes", "4", "-jobs", "6", "-speed", "3000", "-exit-when-done", "-gang-api", "podgroup",
		"-dir", filepath.Join(dir, "data"), "-kubeconfig", filepath.Join(dir, "kc"),
	}, &out, &errOut)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "6 of 6 jobs ended") {
		t.Fatalf("output:\n%s", out.String())
	}
}

func TestFlagErrorsNameTheFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-fanout", "1,x"}, `flag -fanout: "x"`},
		{[]string{"-nodes", "0"}, "flag -nodes: 0"},
		{[]string{"-speed", "-1", "-nodes", "1"}, "flag -speed"},
		{[]string{"extra"}, "unexpected arguments: extra"},
		{[]string{"-gang-api", "crd"}, `flag -gang-api: gang API "crd"`},
	} {
		var out, errOut bytes.Buffer
		err := run(t.Context(), c.args, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("run(%v) = %v, want %q", c.args, err, c.want)
		}
	}
}
