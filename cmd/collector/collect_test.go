package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/schedloop/schedloop/internal/store/storetest"
)

func TestCollectFlagErrorsNameTheFlag(t *testing.T) {
	url := storetest.URL(t)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"serve", "-dcgm-exporter-url", "ftp://x/metrics"}, `"ftp://x/metrics" is not an http(s) URL`},
		{[]string{"serve", "-scrape-interval", "0s"}, "flag -scrape-interval 0s"},
		{[]string{"serve", "-buffer-samples", "0"}, "flag -buffer-samples 0"},
		{[]string{"serve", "-idle-threshold", "1.5"}, "flag -idle-threshold 1.5"},
		{[]string{"serve", "-kubeconfig", "/nonexistent/kubeconfig", "-listen", "127.0.0.1:0"}, `flag -kubeconfig "/nonexistent/kubeconfig"`},
		{[]string{"serve", "-dcgm-hostengine", "embedded", "-kubeconfig", "off", "-listen", "127.0.0.1:0"}, "--dcgm-exporter-url"},
		// A header any client can send lets no one in unless it comes from the proxy.
		{[]string{"serve", "-auth-header", "X-Forwarded-User"}, `flag -auth-header "X-Forwarded-User": needs -auth-trusted-proxies`},
		{[]string{"serve", "-auth-header", "X-Forwarded-User", "-auth-trusted-proxies", "10.0.0.0/33"}, `"10.0.0.0/33" is not a CIDR prefix`},
		{[]string{"serve", "-api-max-concurrent", "0"}, "flag -api-max-concurrent 0"},
		// The shipped Secret's placeholder is refused.
		{[]string{"serve", "-api-token", "CHANGE-ME"}, "flag -api-token (env SCHEDLOOP_API_TOKEN): a 9-character token is guessable"},
	}
	for _, tc := range tests {
		err := run(context.Background(), tc.args, env(url), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("collector %v: err = %v, want it to contain %q", tc.args, err, tc.want)
		}
	}
}
