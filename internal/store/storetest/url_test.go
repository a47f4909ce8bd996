package storetest

import "testing"

func TestURLForSwapsTheDatabase(t *testing.T) {
	tests := []struct{ admin, want string }{
		{"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "postgres://postgres@127.0.0.1:5432/db1?sslmode=disable"},
		{"postgresql://u:p@h/x", "postgresql://u:p@h/db1"},
		{"postgres://h:5433", "postgres://h:5433/db1"},
		{"host=127.0.0.1 user=postgres dbname=postgres sslmode=disable", "host=127.0.0.1 user=postgres sslmode=disable dbname=db1"},
		{"host=/tmp", "host=/tmp dbname=db1"},
	}
	for _, tc := range tests {
		if got := urlFor(tc.admin, "db1"); got != tc.want {
			t.Errorf("urlFor(%q) = %q, want %q", tc.admin, got, tc.want)
		}
	}
}
