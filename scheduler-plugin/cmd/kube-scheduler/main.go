// Command kube-scheduler is the upstream kube-scheduler (k8s.io/kubernetes/cmd/kube-scheduler, the version of
// go.mod) with hrl-scheduler's HRLScore plugin registered (the scheduler-plugins pattern). Enable it in a profile of
// the KubeSchedulerConfiguration (docs/operations.md, "Scoring in the scheduler: the HRLScore plugin"):
//
//	profiles:
//	  - schedulerName: hrl-scheduler
//	    plugins:
//	      multiPoint:
//	        enabled: [{name: HRLScore, weight: 2}]
//	    pluginConfig:
//	      - name: HRLScore
//	        args: {cacheAddress: "hrl-extender:50051", maxTableAgeSeconds: 30}
//
// Built by hack/build-scheduler-plugin.sh.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version" // for version metric registration
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/hrl-scheduler/hrl-scheduler/scheduler-plugin/pkg/hrlscore"
)

func main() {
	command := app.NewSchedulerCommand(app.WithPlugin(hrlscore.Name, hrlscore.New))
	os.Exit(cli.Run(command))
}
