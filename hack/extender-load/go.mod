module github.com/hrl-scheduler/hrl-scheduler/hack/extender-load

go 1.26
