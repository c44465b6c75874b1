"""The Helm chart's values.schema.json, built from the components' own configuration schemas (imported by
hack/gen-manifests.py, which writes it with `make manifests` and checks it with `--check`).

`extender.config` and `descheduler.config` are merged by the chart over the configuration files it generates, so
their schemas are the components' (:func:`policy.config.json_schema` of ``ExtenderConfiguration`` and
``DeschedulerConfiguration``: the same pydantic models ``hrl-extender`` and ``hrl-descheduler`` load) made partial:
no field is required (the generated file supplies it), and otherwise every type, range, enum and unknown key is
refused as the component would refuse it. The chart's own values that become configuration fields
(``descheduler.cooldownSeconds``, ``descheduler.caps``, ``learnedPolicies.scaling``, ...) point into the same
schemas. What JSON Schema cannot say (combinations, e.g. ``minReplicas <= maxReplicas``) the chart checks on the
configuration files it renders, with the components' own messages (hack/chart_rules.py, templates/_validate.tpl),
and the chart's tests load every rendered configuration with the components' loaders.

The file is draft-07 (Helm 3 validates draft-04..07; Helm 4 any draft): the components' ``$defs`` are hoisted to
the root as ``Extender.NAME`` / ``Descheduler.NAME`` with their references rewritten.
"""

from __future__ import annotations

import copy
from typing import Any

from descheduler.config import DeschedulerConfiguration
from extender.config import ExtenderConfiguration
from policy.config import MAX_SECONDS, json_schema

DRAFT = "http://json-schema.org/draft-07/schema#"
#: keywords dropped from the embedded schemas: annotations only (the chart's values.yaml documents the values)
_ANNOTATIONS = ("title", "description", "default", "examples", "$schema")

NAME = {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63}
DURATION = {"type": "string", "pattern": "^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"}
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
#: A Kubernetes CronJob schedule (robfig/cron's standard parser): five fields of digits, names and * , - / ?,
#: or a macro. The fields' ranges are the API server's to check.
CRON = (
    "^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|@every ([0-9]+(\\.[0-9]+)?(ns|us|ms|s|m|h))+"
    "|[0-9A-Za-z*,/?-]+( +[0-9A-Za-z*,/?-]+){4})$"
)
LOG_LEVEL = {"enum": ["DEBUG", "INFO", "WARNING", "ERROR"]}
RESOURCES = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "requests": STRING_MAP | {"additionalProperties": {"type": ["string", "number"]}},
        "limits": STRING_MAP | {"additionalProperties": {"type": ["string", "number"]}},
        "claims": {"type": "array"},
    },  # fmt: skip
    "description": "a container's resources (requests, limits)",
}


def _partial(node: Any, prefix: str) -> Any:
    """A copy of a component schema node with annotations and ``required`` dropped and ``$ref``s rewritten to
    the hoisted ``#/$defs/PREFIX.NAME``."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k in _ANNOTATIONS or k == "required":
                continue
            if k == "$ref" and isinstance(v, str) and v.startswith("#/$defs/"):
                out[k] = f"#/$defs/{prefix}.{v.removeprefix('#/$defs/')}"
            elif k == "properties" and isinstance(v, dict):
                out[k] = {name: _partial(p, prefix) for name, p in v.items()}  # property names are not keywords
            else:
                out[k] = _partial(v, prefix)
        return out
    if isinstance(node, list):
        return [_partial(v, prefix) for v in node]
    return node


def component_defs() -> dict[str, Any]:
    """``$defs`` entries: ``ExtenderConfiguration``, ``DeschedulerConfiguration`` and their hoisted parts."""
    defs: dict[str, Any] = {}
    for kind, model, prefix in (
        ("ExtenderConfiguration", ExtenderConfiguration, "Extender"),
        ("DeschedulerConfiguration", DeschedulerConfiguration, "Descheduler"),
    ):
        schema = json_schema(kind, model)
        for name, sub in sorted(schema.pop("$defs", {}).items()):
            defs[f"{prefix}.{name}"] = _partial(sub, prefix)
        defs[kind] = _partial(schema, prefix)
    return defs


def ref(kind: str, *path: str) -> dict[str, str]:
    """A reference to a property of a component schema, e.g. ``ref("DeschedulerConfiguration", "cooldownSeconds")``."""
    return {"$ref": "/".join(["#/$defs", kind, *(f"properties/{p}" for p in path)])}


def image(what: str) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["repository"],
        "description": f"the {what} image",
        "properties": {
            "repository": {
                "type": "string",
                "minLength": 1,
                "pattern": "^[a-z0-9]([a-z0-9._-]*[a-z0-9])?(:[0-9]+)?/[a-z0-9._/-]+$",
                "description": "fully qualified repository, e.g. ghcr.io/org/hrl-extender",
            },
            "tag": {"type": "string", "pattern": "^([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$"},
            "digest": {"type": "string", "pattern": "^(sha256:[a-f0-9]{64})?$"},
            "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
        },
    }


def _named_list(required: list[str]) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "object", "required": required,
                                       "properties": {"name": {"type": "string", "minLength": 1}}}}  # fmt: skip


def pod_settings(service_account: bool = True) -> dict[str, Any]:
    """The values every workload takes (values.yaml's header lists them)."""
    out: dict[str, Any] = {
        "priorityClassName": {"type": "string", "pattern": "^([a-z0-9]([-a-z0-9.]*[a-z0-9])?)?$", "maxLength": 253},
        "nodeSelector": STRING_MAP,
        "tolerations": {"type": "array", "items": {"type": "object"}},
        "affinity": {"type": "object"},
        "topologySpreadConstraints": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["maxSkew", "topologyKey", "whenUnsatisfiable"],
                "properties": {"maxSkew": {"type": "integer", "minimum": 1}},
            },
        },  # fmt: skip
        "podLabels": STRING_MAP,
        "podAnnotations": STRING_MAP,
        "extraEnv": _named_list(["name"]),
        "extraVolumes": _named_list(["name"]),
        "extraVolumeMounts": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "mountPath"],
                "properties": {"mountPath": {"type": "string", "pattern": "^/"}},
            },
        },  # fmt: skip
    }
    if service_account:
        out["serviceAccount"] = {"type": "object", "additionalProperties": False,
                                 "properties": {"annotations": STRING_MAP}}  # fmt: skip
    return out


def obj(properties: dict[str, Any], required: tuple[str, ...] = (), **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": properties, **extra}
    if required:
        out["required"] = list(required)
    return out


#: Seconds a metrics source's period or age may take (a year at most, as the components' own fields).
_SECONDS = {"type": "number", "exclusiveMinimum": 0, "maximum": 31536000}


def metrics_sources() -> dict[str, Any]:
    """``metricsSources``: where measured use and the service signals come from (docs/operations.md section 9);
    each ``uri`` is ``""`` (off) or a form the components' loaders accept (:mod:`policy.live`)."""
    usage_uri = {
        "type": "string",
        "pattern": "^($|metrics-api$|prometheus\\+cadvisor(\\+https)?://)",
        "description": '"" (off), metrics-api, or prometheus+cadvisor[+https]://HOST:PORT[/PREFIX]?window=1m',
    }
    signals_uri = {
        "type": "string",
        "pattern": "^($|prometheus\\+(istio|linkerd|otel)(\\+https)?://)",
        "description": '"" (off) or prometheus+istio|linkerd|otel[+https]://HOST:PORT?window=1m&namespace=NS',
    }
    return obj(
        {
            "resourceUsage": obj({"uri": usage_uri, "refreshSeconds": _SECONDS, "maxAgeSeconds": _SECONDS}),
            "serviceSignals": obj({"uri": signals_uri, "maxAgeSeconds": _SECONDS}),
        },
        description="The live inputs (docs/operations.md section 9): where measured use and service signals come from.",
    )


def build() -> dict[str, Any]:
    """The whole values.schema.json."""
    des = "DeschedulerConfiguration"
    integer_seconds = {"type": "integer", "minimum": 1, "maximum": MAX_SECONDS}
    extender = obj(
        {
            "image": image("extender"),
            "replicas": {"type": "integer", "minimum": 1, "maximum": 100},
            "port": PORT,
            "healthPort": {
                "anyOf": [PORT, {"type": "null"}],
                "description": "the probes' own port (listen.healthPort), not port; null = the probes on port",
            },
            "urlPrefix": {"type": "string", "pattern": "^/[A-Za-z0-9/_-]*$"},
            "mode": {
                "enum": ["active", "shadow"],
                "description": "active: our scores count; shadow: neutral scores, decisions logged "
                "(docs/shadow-mode.md)",
            },
            "logLevel": LOG_LEVEL,
            "resources": RESOURCES,
            "config": {
                "$ref": "#/$defs/ExtenderConfiguration",
                "description": "ExtenderConfiguration fields merged over the generated file",
            },  # fmt: skip
            **pod_settings(),
        },
        required=("image",),
    )
    descheduler = obj(
        {
            "enabled": {"type": "boolean"},
            "image": image("descheduler"),
            "mode": {"enum": ["cronjob", "interval"]},
            "schedule": {
                "type": "string",
                "pattern": CRON,
                "description": "a CronJob schedule: five fields (minute hour day-of-month month day-of-week) or a "
                "macro (@hourly, @daily, @weekly, @monthly, @yearly, @annually, @midnight, @every DURATION)",
            },
            "activeDeadlineSeconds": integer_seconds,
            "intervalSeconds": {"allOf": [ref(des, "intervalSeconds"), integer_seconds]},
            "replicas": {"type": "integer", "minimum": 1, "maximum": 10},
            "metricsPort": PORT,
            "dryRun": ref(des, "dryRun"),
            "namespaces": {
                "type": "array",
                "uniqueItems": True,
                "items": NAME,
                "description": "namespaces it may evict and scale in (RoleBindings); never kube-system or its own",
            },  # fmt: skip
            "clusterWide": {"type": "boolean"},
            "caps": {"$ref": "#/$defs/Descheduler.Caps"},
            "cooldownSeconds": {"allOf": [ref(des, "cooldownSeconds"), {"type": "integer"}]},
            "excludedNamespaces": {"type": "array", "items": NAME},
            "logLevel": LOG_LEVEL,
            "persistence": obj(
                {
                    "size": {"type": "string", "pattern": "^[0-9]+(Ki|Mi|Gi|Ti|k|M|G|T)?$"},
                    "storageClassName": {"type": "string"},
                }
            ),  # fmt: skip
            "resources": RESOURCES,
            "config": {
                "$ref": f"#/$defs/{des}",
                "description": "DeschedulerConfiguration fields merged over the generated file",
            },  # fmt: skip
            **pod_settings(),
        },
        required=("image",),
    )
    scheduler = obj(
        {
            "mode": {"enum": ["second", "dropin", "none"]},
            "schedulerName": NAME,
            "image": image("kube-scheduler"),
            "replicas": {"type": "integer", "minimum": 1, "maximum": 10},
            "verbosity": {"type": "integer", "minimum": 0, "maximum": 10},
            "resources": RESOURCES,
            "extender": obj(
                {
                    "weight": {"type": "integer", "minimum": 1, "maximum": 100},
                    "httpTimeout": DURATION,
                    "filter": {"type": "boolean"},
                }
            ),  # fmt: skip
            "dropin": obj({"extenderHost": {"type": "string"}, "kubeconfig": {"type": "string", "minLength": 1}}),
            "scoring": obj(
                {
                    "mode": {"enum": ["extender", "plugin"]},
                    "image": image("hrl-kube-scheduler (kube-scheduler with the HRLScore plugin)"),
                    "maxTableAgeSeconds": {"type": "number", "exclusiveMinimum": 0, "maximum": 86400},
                }
            )
            | {
                "description": "extender: HTTP calls to hrl-extender; plugin: the HRLScore plugin in the "
                "hrl-kube-scheduler image (mode second only)"
            },  # fmt: skip
            **pod_settings(),
        },
        required=("image",),
    )
    scaling = "#/$defs/Descheduler.ScalingConfig/properties"
    learned = obj(
        {
            "enabled": {"type": "boolean"},
            "cache": obj(
                {
                    "mode": {"enum": ["deployment", "sidecar"]},
                    "image": image("embedding-cache"),
                    "port": PORT,
                    "metricsPort": PORT,
                    "resources": RESOURCES,
                    **pod_settings(service_account=False),
                },
                required=("image",),
            ),
            "bundles": obj(
                {
                    "volume": {
                        "type": "object",
                        "description": "a volume source (configMap, persistentVolumeClaim, "
                        "image, ...); {} = the image's bundles",
                    },
                    **{
                        k: {
                            "type": "string",
                            "pattern": "^([^/.][^/]*(/[^/.][^/]*)*)?$",
                            "description": "a directory in the volume (relative, no ..)",
                        }
                        for k in ("placement", "highLevel", "encoder")
                    },
                }  # fmt: skip
            ),
            "scaling": obj({k: {"$ref": f"{scaling}/{k}"} for k in ("minReplicas", "maxReplicas", "maxStepPerCycle")}),
            "sloP95Ms": {"$ref": "#/$defs/Descheduler.IntentPolicyConfig/properties/sloP95Ms"},
        }
    )
    monitor = obj({"enabled": {"type": "boolean"}, "interval": DURATION, "labels": STRING_MAP})
    metrics = obj(
        {
            "service": obj({"enabled": {"type": "boolean"}}),
            "serviceMonitor": monitor,
            "podMonitor": monitor,
            "prometheusRule": obj(
                {
                    "enabled": {"type": "boolean"},
                    "labels": STRING_MAP,
                    "neutralAnswerRatio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                    "staleSnapshotSeconds": integer_seconds,
                    "runsMissingSeconds": integer_seconds
                    | {
                        "description": "HrlDeschedulerRunsMissing fires when the last run pushed longer ago than "
                        "this; above the period of descheduler.schedule plus a run"
                    },
                    "runbookBaseURL": {"type": "string", "pattern": "^https?://[^\\s]+[^/\\s]$"},
                }
            ),
            "grafanaDashboard": obj({"enabled": {"type": "boolean"}, "labels": STRING_MAP}),
            "pushgateway": obj(
                {
                    "url": {
                        "type": "string",
                        "pattern": "^(https?://[^\\s]+)?$",
                        "description": "Pushgateway URL (cronjob mode)",
                    }
                }
            ),  # fmt: skip
        }
    )
    schema = {
        "$schema": DRAFT,
        "title": "hrl-scheduler chart values (GENERATED by hack/gen-manifests.py from hack/chart_schema.py and the "
        "components' configuration schemas; do not edit)",
        **obj(
            {
                "nameOverride": {"type": "string", "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$", "maxLength": 40},
                "extender": extender,
                "descheduler": descheduler,
                "scheduler": scheduler,
                "tls": obj({"enabled": {"type": "boolean"}, "secretName": NAME}),
                "learnedPolicies": learned,
                "podDisruptionBudgets": obj({"enabled": {"type": "boolean"}}),
                "networkPolicy": obj(
                    {
                        "enabled": {"type": "boolean"},
                        "extenderFrom": {"type": "array", "items": {"type": "object", "minProperties": 1}},
                        "metricsNamespace": {"anyOf": [NAME, {"const": ""}]},
                    }
                ),
                "metricsSources": metrics_sources(),
                "logFormat": {"enum": ["json", "text"]},
                "metrics": metrics,
                "imagePullSecrets": {
                    "type": "array",
                    "items": obj({"name": {"type": "string", "minLength": 1}}, required=("name",)),
                },  # fmt: skip
                "createNamespace": {"type": "boolean"},
                "plainLabels": {"type": "boolean"},
            },
            required=("extender", "descheduler", "scheduler"),
        ),
        "$defs": component_defs(),
    }
    return copy.deepcopy(schema)
