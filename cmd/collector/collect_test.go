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
		{[]string{"serve", "-sample-limit", "0"}, "flag -sample-limit 0"},
		{[]string{"serve", "-scrape-body-limit", "-1"}, "flag -scrape-body-limit -1"},
		{[]string{"serve", "-scrape-timeout", "0s"}, "flag -scrape-timeout 0s"},
		{[]string{"serve", "-scrape-target-limits", "http://n1:9400/metrics"}, "names no limit"},
		{[]string{"serve", "-scrape-target-limits", "http://n1:9400/metrics,sample_limit=x"}, `"sample_limit=x" in "http://n1:9400/metrics,sample_limit=x": want sample_limit=N`},
		{[]string{"serve", "-scrape-target-limits", "http://n1:9400/metrics,samples=5"}, `unknown limit "samples"`},
		{[]string{"serve", "-scrape-target-limits", "n1:9400,sample_limit=5"}, "is not an http(s) URL"},
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

func TestTargetLimitsFlag(t *testing.T) {
	tl := targetLimits{}
	for _, v := range []string{"http://n1:9400/metrics,sample_limit=500", "http://n2:9400/metrics,body_limit=1000,sample_limit=7"} {
		if err := tl.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	want := "http://n1:9400/metrics,sample_limit=500,body_limit=0 http://n2:9400/metrics,sample_limit=7,body_limit=1000"
	if got := tl.String(); got != want {
		t.Errorf("limits %q, want %q", got, want)
	}
}
