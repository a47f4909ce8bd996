// Command scheduler is kube-scheduler with schedloop's plugins compiled in.
// Every kube-scheduler flag and KubeSchedulerConfiguration field works as
// upstream documents; a configuration selects the plugins by name
// (SchedloopProfile, SchedloopGang, SchedloopTopology, SchedloopQueue; see
// deploy/scheduler-config.yaml).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/schedloop/schedloop/internal/schedplugins"
)

func main() {
	command := app.NewSchedulerCommand(schedplugins.Options()...)
	os.Exit(cli.Run(command))
}
