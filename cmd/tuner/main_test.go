package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

func TestProfilesCommand(t *testing.T) {
	url := storetest.URL(t)
	getenv := func(k string) string {
		if k == "DATABASE_URL" {
			return url
		}
		return ""
	}
	var out strings.Builder
	err := run(context.Background(), []string{"profiles"}, getenv, &out, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "run `collector migrate up`") {
		t.Fatalf("profiles on an unmigrated database: err = %v, want advice to migrate", err)
	}
	s := storetest.Open(t, url)
	if _, err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), []string{"profiles"}, getenv, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "no profiles stored yet") {
		t.Errorf("empty database printed %q", out.String())
	}
	if _, err := s.InsertProfile(context.Background(), schedloop.Profile{Name: "tuned-1", Reason: "beats default by 4% idle"}); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(context.Background(), []string{"profiles", "-status", "proposed"}, getenv, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tuned-1", "proposed", "beats default by 4% idle"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("listing %q lacks %q", out.String(), want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"profiles", "-status", "bogus"}, `flag -status: "bogus" is not a profile status`},
		{[]string{"profiles", "-limit", "0"}, "flag -limit: 0 must be positive"},
		{[]string{"nope"}, `unknown command "nope"`},
	} {
		if err := run(context.Background(), tc.args, getenv, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("tuner %v: err = %v, want %q", tc.args, err, tc.want)
		}
	}
}
