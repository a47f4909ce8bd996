// Package cli is the shared entry point of schedloop's own commands: it
// turns SIGINT/SIGTERM into context cancellation and errors into exit codes,
// so each main only wires flags to work.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// RunFunc is a command's body. Time, environment and output are injected so
// tests can drive it.
type RunFunc func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error

// Main runs run with the process's arguments and exits: 0 on success or
// after -h, 1 with "name: error" on stderr otherwise.
func Main(name string, run RunFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	err = interrupted(ctx, err)
	stop()
	os.Exit(ExitCode(name, err, os.Stderr))
}

// interrupted says so when err is the work a signal cancelled stopping
// (a replay, a backtest), so "context canceled" deep in a chain of causes
// reads as what happened: the command was stopped before it finished.
func interrupted(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return fmt.Errorf("interrupted by a signal before finishing, nothing further was done: %w", err)
	}
	return err
}

// ExitCode reports err on stderr and maps it to an exit status.
func ExitCode(name string, err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	default:
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
}

// Subcommands dispatches args[0] to the matching command, printing usage
// for help requests and unknown commands.
func Subcommands(usage string, commands map[string]RunFunc) RunFunc {
	return func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
		if len(args) == 0 {
			fmt.Fprint(stderr, usage)
			return errors.New("missing command")
		}
		switch args[0] {
		case "help", "-h", "-help", "--help":
			fmt.Fprint(stdout, usage)
			return flag.ErrHelp
		}
		cmd, ok := commands[args[0]]
		if !ok {
			fmt.Fprint(stderr, usage)
			return fmt.Errorf("unknown command %q", args[0])
		}
		return cmd(ctx, args[1:], getenv, stdout, stderr)
	}
}
