package storetest

import (
	"net/url"
	"strings"
)

// urlFor swaps the database of a connection string, in either URL form or
// libpq keyword/value form.
func urlFor(admin, database string) string {
	if u, err := url.Parse(admin); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + database
		return u.String()
	}
	var kept []string
	for _, field := range strings.Fields(admin) {
		if !strings.HasPrefix(field, "dbname=") {
			kept = append(kept, field)
		}
	}
	return strings.Join(append(kept, "dbname="+database), " ")
}
