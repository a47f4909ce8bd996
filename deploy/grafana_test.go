package deploy

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/schedloop/schedloop/internal/store/storetest"
)

type grafanaDashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			RawSQL string `json:"rawSql"`
		} `json:"targets"`
	} `json:"panels"`
}

// TestGrafanaQueriesRunAgainstTheSchema executes every panel's SQL, with
// Grafana's macros expanded, against a freshly migrated database: a renamed
// column or view breaks this test, not a user's dashboard.
func TestGrafanaQueriesRunAgainstTheSchema(t *testing.T) {
	data, err := os.ReadFile("grafana/schedloop-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if len(d.Panels) == 0 {
		t.Fatal("dashboard has no panels")
	}
	s := storetest.New(t)
	macros := strings.NewReplacer(
		"$__timeFrom()", "'2026-11-01T00:00:00Z'::timestamptz",
		"$__timeTo()", "'2026-12-01T00:00:00Z'::timestamptz",
		"$high_priority", "1000",
	)
	for _, p := range d.Panels {
		for _, target := range p.Targets {
			if target.RawSQL == "" {
				t.Errorf("panel %q has an empty query", p.Title)
				continue
			}
			sql := macros.Replace(target.RawSQL)
			if strings.Contains(sql, "$") {
				t.Errorf("panel %q uses a macro this test does not expand: %s", p.Title, sql)
				continue
			}
			rows, err := s.Pool().Query(context.Background(), sql)
			if err == nil {
				for rows.Next() {
				}
				err = rows.Err()
				rows.Close()
			}
			if err != nil {
				t.Errorf("panel %q: %v\n%s", p.Title, err, sql)
			}
		}
	}
}
