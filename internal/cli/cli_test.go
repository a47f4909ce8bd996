package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestSubcommandsAndExitCodes(t *testing.T) {
	var got []string
	run := Subcommands("usage text\n", map[string]RunFunc{
		"echo": func(_ context.Context, args []string, _ func(string) string, stdout, _ io.Writer) error {
			got = args
			return nil
		},
	})
	if err := run(context.Background(), []string{"echo", "a", "b"}, nil, io.Discard, io.Discard); err != nil || strings.Join(got, ",") != "a,b" {
		t.Fatalf("echo: err %v, args %v", err, got)
	}
	var out, errOut strings.Builder
	if err := run(context.Background(), []string{"--help"}, nil, &out, &errOut); !errors.Is(err, flag.ErrHelp) || out.String() != "usage text\n" {
		t.Errorf("help: err %v, stdout %q", err, out.String())
	}
	for _, args := range [][]string{nil, {"nope"}} {
		errOut.Reset()
		err := run(context.Background(), args, nil, io.Discard, &errOut)
		if err == nil || !strings.Contains(errOut.String(), "usage text") {
			t.Errorf("%v: err %v, stderr %q; want an error and the usage", args, err, errOut.String())
		}
		if code := ExitCode("tool", err, &errOut); code != 1 || !strings.Contains(errOut.String(), "tool: ") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut.String())
		}
	}
	if code := ExitCode("tool", flag.ErrHelp, io.Discard); code != 0 {
		t.Errorf("help exits %d, want 0", code)
	}
}

func TestInterruptedWorkSaysSo(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	work := fmt.Errorf("backtest: %w", context.Canceled)
	if err := interrupted(ctx, work); err != work {
		t.Errorf("before any signal: %v, want the error as it is", err)
	}
	cancel()
	err := interrupted(ctx, work)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "interrupted by a signal") {
		t.Errorf("after the signal: %v, want it said and still context.Canceled", err)
	}
	if code := ExitCode("tool", err, io.Discard); code != 1 {
		t.Errorf("interrupted work exits %d, want 1", code)
	}
	if err := interrupted(ctx, nil); err != nil {
		t.Errorf("work that finished anyway: %v, want nil", err)
	}
}
