package deploy

import _ "embed"

// SchedulerConfig is the shipped KubeSchedulerConfiguration
// (scheduler-config.yaml), for programs that run the scheduler in-process
// with the same plugin set a cluster gets.
//
//go:embed scheduler-config.yaml
var SchedulerConfig string
