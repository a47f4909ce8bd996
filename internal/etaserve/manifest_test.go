package etaserve

import (
	"os"
	"reflect"
	"strings"
	"testing"

	schedloop "github.com/schedloop/schedloop"
)

func TestJobFromManifest(t *testing.T) {
	for _, tc := range []struct {
		file    string
		members int
		want    schedloop.Job
	}{
		{"testdata/gang-job.yaml", 0, schedloop.Job{UID: WhatIfUID, Namespace: "ml", Name: "llm-pretrain", Kind: schedloop.JobKindGang, Queue: "team-a",
			MinMember: 4, GPUsPerMember: 8, CPUMilliPerMember: 32000, MemoryMiBPerMember: 256 << 10}},
		{"testdata/pod.json", 0, schedloop.Job{UID: WhatIfUID, Namespace: "research", Name: "notebook", Kind: schedloop.JobKindPod,
			MinMember: 1, GPUsPerMember: 1, CPUMilliPerMember: 4000, MemoryMiBPerMember: 16 << 10}},
	} {
		data, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		got, err := JobFromManifest(data, tc.members)
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.file, got, tc.want)
		}
	}
}

func TestJobFromManifestRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		name, manifest, want string
	}{
		{"not yaml", "{{{", "does not decode"},
		{"no kind", "apiVersion: v1\nmetadata: {name: x}", "field kind is missing"},
		{"other kind", "apiVersion: apps/v1\nkind: Deployment", `field kind: "Deployment"`},
		{"unknown field", "apiVersion: v1\nkind: Pod\nspec: {containerz: []}", "unknown field"},
		{"parallelism", "apiVersion: batch/v1\nkind: Job\nspec: {parallelism: 0, template: {spec: {containers: []}}}", "field spec.parallelism: 0"},
		{"resource no node has", "apiVersion: v1\nkind: Pod\nspec: {containers: [{name: a, resources: {limits: {example.com/fpga: 1}}}]}", `field spec.containers[0].resources: resource "example.com/fpga": no node offers it`},
		{"too large", "apiVersion: v1\nkind: Pod\n#" + strings.Repeat("x", MaxManifestBytes), "over the limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := JobFromManifest([]byte(tc.manifest), 0)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func FuzzJobFromManifest(f *testing.F) {
	for _, file := range []string{"testdata/gang-job.yaml", "testdata/pod.json"} {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, 0)
	}
	f.Fuzz(func(t *testing.T, data []byte, members int) {
		j, err := JobFromManifest(data, members)
		if err != nil {
			return
		}
		if j.MinMember < 1 || j.GPUsPerMember < 0 || j.UID != WhatIfUID {
			t.Errorf("accepted a job that cannot be estimated: %+v", j)
		}
	})
}
