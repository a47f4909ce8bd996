#!/usr/bin/env bash
# Prints the harness figures as BENCH lines:
#   BENCH harness_startup_s <s> s          etcd + kube-apiserver up and serving (mean of 3 starts)
#   BENCH harness_jobs_per_s <n> jobs/s    trace jobs submitted, run and finished per wall second
#   BENCH harness_peak_rss_mib <n> MiB     peak resident memory of the process running the cluster
set -euo pipefail
cd "$(dirname "$0")/.."
go test ./internal/harness -run '^$' -bench '^BenchmarkHarness(Startup|Jobs)$' -benchtime=1x -count=1 | grep '^BENCH '
