// Package web holds the dashboard's assets, embedded into the collector
// binary with go:embed so a deployment is one file. It serves files only;
// data comes from the collector's JSON API.
package web
