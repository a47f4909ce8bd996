package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"strings"
	"testing"
)

// TestConfigurationDocMatchesHelp keeps docs/configuration.md's demo section
// equal to `demo -h`, so the reference cannot drift from the flags.
func TestConfigurationDocMatchesHelp(t *testing.T) {
	var out, help bytes.Buffer
	err := run(t.Context(), []string{"-h"}, func(string) string { return "" }, &out, &help)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("demo -h: %v", err)
	}
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	want := "## `demo`\n\n```text\n" + help.String() + "```\n"
	if !strings.Contains(string(doc), want) {
		t.Errorf("docs/configuration.md's demo section differs from `demo -h`; replace it with:\n%s", want)
	}
}

func TestFlagErrorsNameTheFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-jobs", "3"}, "flag -jobs: 3"},
		{[]string{"-speed", "-1"}, "flag -speed"},
		{[]string{"-publish", "sometimes"}, `flag -publish: "sometimes"`},
		{[]string{"-high-priority-seed", "-1"}, "-high-priority-seed"},
		{[]string{"-compress", "0.5"}, "flag -compress: 0.5"},
		{[]string{"-knobs", "weights,colour"}, `flag -knobs: knob "colour" is unknown`},
		{[]string{"-gang-api", "crd"}, `flag -gang-api: gang API "crd"`},
		{[]string{"extra"}, "unexpected arguments: extra"},
	} {
		var out, errOut bytes.Buffer
		err := run(t.Context(), c.args, func(string) string { return "" }, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("run(%v) = %v, want %q", c.args, err, c.want)
		}
	}
}
