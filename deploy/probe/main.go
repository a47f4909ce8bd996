// Command probe is the health check schedloop's container images carry for
// docker compose: the distroless images have no shell or curl. It fetches
// one URL and exits 0 on a 2xx answer, 1 otherwise.
//
//	probe http://127.0.0.1:8080/readyz
//	probe -insecure https://127.0.0.1:10259/healthz   # kube-scheduler's self-signed port
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "probe:", err)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	insecure := fs.Bool("insecure", false, "accept any TLS certificate (for a local self-signed port such as kube-scheduler's)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: probe [flags] URL\n\nExits 0 when URL answers 2xx.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("want exactly one URL")
	}
	client := &http.Client{Timeout: *timeout}
	if *insecure {
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // local probe of a self-signed port, asked for by flag
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fs.Arg(0), nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%s answered %s: %s", fs.Arg(0), resp.Status, body)
	}
	fmt.Fprintf(stdout, "%s %s\n", resp.Status, body)
	return nil
}
