package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/api/apitest"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

func TestWhyPrintsTheBreakdownAndTimeline(t *testing.T) {
	url := storetest.URL(t)
	st := storetest.Open(t, url)
	if _, err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	hist, err := apitest.Fill(context.Background(), st, 7, time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), 24)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := run(context.Background(), []string{"why", hist.Gated.Namespace + "/" + hist.Gated.Name}, env(url), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"pod " + hist.Gated.Namespace + "/" + hist.Gated.Name, "waited ", "gang incomplete: 1/2 members",
		"insufficient GPU", "running on " + hist.Gated.Node, "scheduling attempts: "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("why output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := run(context.Background(), []string{"why", "-kind", "job", hist.GangJob.Name}, env(url), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "members:") || !strings.Contains(out.String(), "last member") {
		t.Errorf("job why output lacks its members:\n%s", out.String())
	}
	if err := run(context.Background(), []string{"why", "nobody"}, env(url), io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "no pod or job matches") {
		t.Errorf("why nobody: err = %v", err)
	}
}
