"""The cross-field checks of the components' configurations, as the Helm chart applies them (imported by
hack/gen-manifests.py, which writes manifests/charts/hrl-scheduler/templates/_validate.tpl from :data:`RULES` with
`make manifests` and checks it with `--check`).

values.schema.json (hack/chart_schema.py) embeds the components' JSON schemas, which say everything about one field
(type, range, enum, unknown keys) and nothing about combinations: ``limits.maxLoopBusySeconds`` above
``requestDeadlineSeconds``, ``mode: shadow`` with ``decisions.enabled: false``, ``scaling.minReplicas`` above
``maxReplicas``. Those are the models' own checks (pydantic ``model_validator``s, and a field validator that reads
another field) of ``ExtenderConfiguration`` and ``DeschedulerConfiguration``. Each :class:`Rule` here states one of
them as a condition on the configuration file the chart renders (the generated file with ``extender.config`` /
``descheduler.config`` merged over it, read back with ``fromYaml``; a field it does not set has the model's default,
read from the model), and the template fails the render with the component's own line, its file named as the value
it comes from::

    extender.config: limits: maxLoopBusySeconds (5) must not exceed requestDeadlineSeconds (0.1)

It cannot drift: :func:`uncovered` lists every such validator of the two models (walked through their nested
models) that neither a rule nor :data:`COVERED` accounts for, and gen-manifests refuses to write or check the
chart while one is listed; tests/unit/test_chart_rules.py renders each rule's ``refused`` values (helm template must
fail with the line the component's loader gives for the same configuration) and its ``accepted`` values (both
accept them).

Conditions are tuples, evaluated by the template on the rendered file: ``("gt"|"ge"|"lt"|"le", A, B)`` numbers
(``A``/``B``: a dotted path in the file, a number, or ``("mul", k, A)``), ``("is", PATH, const)`` a string or boolean
equal to ``const``, ``("set", PATH)`` not null, ``("and"|"or", C, ...)``, ``("not", C)``. A message's ``{path}``
is the value at ``path`` as ``str`` prints it, ``{path:g}`` / ``{path:d}`` / ``{path!r}`` as Python's format spec
does (``%.6g``, an integer, a quoted string).
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from descheduler.config import DeschedulerConfiguration
from extender.config import ExtenderConfiguration

#: component → its configuration model (the chart's values key: extender.config, descheduler.config)
MODELS: dict[str, type[BaseModel]] = {"extender": ExtenderConfiguration, "descheduler": DeschedulerConfiguration}
#: component → the chart's template that renders its configuration file
TEMPLATES = {"extender": "hrl.extenderConfig", "descheduler": "hrl.deschedulerConfig"}


@dataclass(frozen=True)
class Rule:
    """One cross-field check of a component's configuration: the render fails when ``refuse`` holds.

    ``validator``: ``Model._method`` of the check it states (one validator may be several rules). ``at``: the dotted
    path of the model in the file (``""``: the top), as the loader prefixes its line. ``message``: the loader's
    problem text (module docstring for ``{path}``). ``refused`` / ``accepted``: chart values that break the rule and
    values next to it that keep it (the test renders both; the ``config`` key of the component is merged over the
    rendered file, the rest are chart values)."""

    component: str
    validator: str
    at: str
    refuse: tuple[Any, ...]
    message: str
    refused: dict[str, Any]
    accepted: dict[str, Any] = field(default_factory=dict)


def _ext(config: dict[str, Any], **values: Any) -> dict[str, Any]:
    return {"extender": {**values, "config": config}}


def _des(config: dict[str, Any], descheduler: dict[str, Any] | None = None, **values: Any) -> dict[str, Any]:
    return {**values, "descheduler": {**(descheduler or {}), "config": config}}


_LEARNED = {"learnedPolicies": {"enabled": True}}
_BUNDLE_SET = "bundle ({AT.bundle!r}) is only read by name: WANT (got name: {AT.name})"


def _nest(at: str, leaf: dict[str, Any]) -> dict[str, Any]:
    """``leaf`` at dotted path ``at``: ``_nest("planner.autoscaler", {...})`` → ``{"planner": {"autoscaler": ...}}``."""
    out: dict[str, Any] = leaf
    for part in reversed(at.split(".")):
        out = {part: out}
    return out


def _bundle_rule(component: str, validator: str, at: str, want: str) -> Rule:
    """``bundle`` is read only by the ``want`` policy of the model at ``at``."""
    make = _ext if component == "extender" else _des
    return Rule(
        component,
        validator,
        at,
        ("and", ("set", f"{at}.bundle"), ("not", ("is", f"{at}.name", want))),
        _BUNDLE_SET.replace("AT", at).replace("WANT", want),
        make(_nest(at, {"bundle": "/bundles/x"})),
        make(_nest(at, {"name": want, "bundle": "/bundles/x"})),
    )


def _intent_only_rule(field: str, example: float) -> Rule:
    """``planner.autoscaler.<field>`` is read only by the ``intent`` autoscaler (``_intent_only_fields``)."""
    at = f"planner.autoscaler.{field}"
    return Rule(
        "descheduler",
        "AutoscalerConfig._intent_only_fields",
        "planner.autoscaler",
        ("and", ("set", at), ("not", ("is", "planner.autoscaler.name", "intent"))),
        f"{field} ({{{at}:g}}) is only read by name: intent (got name: {{planner.autoscaler.name}})",
        _des({"planner": {"autoscaler": {field: example}}}),
        _des({"planner": {"autoscaler": {"name": "intent", field: example}}}),
    )


RULES: tuple[Rule, ...] = (
    # ---- ExtenderConfiguration ----
    _bundle_rule("extender", "PolicyConfig._bundle_needs_learned", "policy", "learned"),
    Rule(
        "extender",
        "LimitsConfig._busy_within_deadline",
        "limits",
        ("gt", "limits.maxLoopBusySeconds", "limits.requestDeadlineSeconds"),
        "maxLoopBusySeconds ({limits.maxLoopBusySeconds:g}) must not exceed requestDeadlineSeconds "
        "({limits.requestDeadlineSeconds:g})",
        _ext({"limits": {"maxLoopBusySeconds": 5, "requestDeadlineSeconds": 0.1}}),
        _ext({"limits": {"maxLoopBusySeconds": 0.1, "requestDeadlineSeconds": 0.1}}),
    ),
    Rule(
        "extender",
        "ExtenderConfiguration._usage_needs_the_watch",
        "",
        ("and", ("set", "metricsSources.resourceUsage.uri"), ("not", ("is", "kubernetes.enabled", True))),
        "metricsSources.resourceUsage.uri: needs kubernetes.enabled (measured use reaches the index through the "
        "watch's snapshot builder)",
        _ext({"kubernetes": {"enabled": False}, "metricsSources": {"resourceUsage": {"uri": "metrics-api"}}}),
        _ext({"metricsSources": {"resourceUsage": {"uri": "metrics-api"}}}),
    ),
    Rule(
        "extender",
        "ExtenderConfiguration._table_needs_a_cache",
        "",
        ("and", ("is", "scoreTable.publish", True), ("not", ("set", "scoreTable.address")), ("not", ("set", "cache"))),
        "scoreTable.publish: needs scoreTable.address or cache.address (the cache HRLScore watches)",
        _ext({"scoreTable": {"publish": True}}),
        _ext({"scoreTable": {"publish": True, "address": "127.0.0.1:50051"}}),
    ),
    Rule(
        "extender",
        "ExtenderConfiguration._decisions_in_shadow",
        "",
        ("and", ("is", "mode", "shadow"), ("is", "decisions.enabled", False)),
        "decisions.enabled: false and mode: shadow: shadow mode records decisions",
        _ext({"decisions": {"enabled": False}}, mode="shadow"),
        _ext({"decisions": {"enabled": True}}, mode="shadow"),
    ),
    Rule(
        "extender",
        "ExtenderConfiguration._decisions_in_shadow",
        "",
        ("and", ("is", "mode", "shadow"), ("is", "scoreTable.publish", True)),
        "scoreTable.publish: true and mode: shadow: the HRLScore plugin would score with the policy while shadow "
        "mode answers neutral scores; publish the table in active mode only",
        _ext({"scoreTable": {"publish": True, "address": "127.0.0.1:50051"}}, mode="shadow"),
        _ext({"scoreTable": {"publish": False, "address": "127.0.0.1:50051"}}, mode="shadow"),
    ),
    Rule(
        "extender",
        "ExtenderConfiguration._decisions_in_shadow",
        "",
        ("and", ("is", "decisions.events", True), ("not", ("is", "kubernetes.enabled", True))),
        "decisions.events: true needs kubernetes.enabled: true (the Events go to the API server)",
        _ext({"decisions": {"events": True}, "kubernetes": {"enabled": False}}),
        _ext({"decisions": {"events": True}}),
    ),
    Rule(
        "extender",
        "ExtenderConfiguration._one_snapshot_source",
        "",
        ("and", ("is", "kubernetes.enabled", True), ("set", "snapshotFile")),
        "snapshotFile ({snapshotFile!r}) and kubernetes.enabled are exclusive: the snapshot comes from a file or "
        "from the live cluster",
        _ext({"snapshotFile": "/snapshots/cluster.json"}),
        _ext({"snapshotFile": "/snapshots/cluster.json", "kubernetes": {"enabled": False}}),
    ),
    # ---- DeschedulerConfiguration ----
    Rule(
        "descheduler",
        "DeschedulerConfiguration._resize_needs_hierarchical",
        "",
        ("and", ("is", "resize.enabled", True), ("not", ("is", "planner.name", "hierarchical"))),
        "resize.enabled: true needs planner.name: hierarchical (got planner.name: {planner.name})",
        _des({"resize": {"enabled": True}}),
        _des({"resize": {"enabled": True}}, **_LEARNED),
    ),
    _bundle_rule("descheduler", "AutoscalerConfig._bundle_needs_drpc", "planner.autoscaler", "drpc"),
    Rule(
        "descheduler",
        "AutoscalerConfig._tolerance_not_drpc",
        "planner.autoscaler",
        ("and", ("set", "planner.autoscaler.tolerance"), ("is", "planner.autoscaler.name", "drpc")),
        "tolerance ({planner.autoscaler.tolerance:g}) is not read by name: drpc (its students set replica targets "
        "without a tolerance band; utilization-target and intent read it)",
        _des({"planner": {"autoscaler": {"name": "drpc", "tolerance": 0.1}}}),
        _des({"planner": {"autoscaler": {"name": "intent", "tolerance": 0.1}}}),
    ),
    *(_intent_only_rule(f, v) for f, v in (("burst", 0.5), ("forecastMin", 1), ("limitTarget", 0.2))),
    _bundle_rule("descheduler", "IntentPolicyConfig._range", "planner.intentPolicy", "learned"),
    Rule(
        "descheduler",
        "IntentPolicyConfig._range",
        "planner.intentPolicy",
        ("ge", "planner.intentPolicy.lowUtilization", "planner.intentPolicy.highUtilization"),
        "lowUtilization ({planner.intentPolicy.lowUtilization:g}) must be < highUtilization "
        "({planner.intentPolicy.highUtilization:g})",
        _des({"planner": {"intentPolicy": {"lowUtilization": 0.8, "highUtilization": 0.8}}}),
        _des({"planner": {"intentPolicy": {"lowUtilization": 0.79, "highUtilization": 0.8}}}),
    ),
    Rule(
        "descheduler",
        "IntentPolicyConfig._range",
        "planner.intentPolicy",
        ("gt", "planner.intentPolicy.localityMin", "planner.intentPolicy.localityMax"),
        "localityMin ({planner.intentPolicy.localityMin:g}) must be <= localityMax "
        "({planner.intentPolicy.localityMax:g})",
        _des({"planner": {"intentPolicy": {"localityMin": 2, "localityMax": 1.5}}}),
        _des({"planner": {"intentPolicy": {"localityMin": 1.5, "localityMax": 1.5}}}),
    ),
    Rule(
        "descheduler",
        "IntentPolicyConfig._range",
        "planner.intentPolicy",
        ("gt", "planner.intentPolicy.balanceMin", "planner.intentPolicy.balanceMax"),
        "balanceMin ({planner.intentPolicy.balanceMin:g}) must be <= balanceMax ({planner.intentPolicy.balanceMax:g})",
        _des({"planner": {"intentPolicy": {"balanceMin": 3}}}),
        _des({"planner": {"intentPolicy": {"balanceMin": 2}}}),
    ),
    _bundle_rule("descheduler", "PlacementConfig._bundle_needs_learned", "placement", "learned"),
    Rule(
        "descheduler",
        "ScalingConfig._bounds",
        "scaling",
        ("gt", "scaling.minReplicas", "scaling.maxReplicas"),
        "minReplicas ({scaling.minReplicas:d}) must be <= maxReplicas ({scaling.maxReplicas:d})",
        _des({"scaling": {"minReplicas": 5, "maxReplicas": 2}}),
        _des({"scaling": {"minReplicas": 2, "maxReplicas": 2}}),
    ),
    Rule(
        "descheduler",
        "ResizeConfig._steps",
        "resize",
        ("ge", "resize.minChange", "resize.maxStep"),
        "minChange ({resize.minChange:g}) must be < maxStep ({resize.maxStep:g})",
        _des({"resize": {"minChange": 0.5, "maxStep": 0.5}}),
        _des({"resize": {"minChange": 0.4, "maxStep": 0.5}}),
    ),
    Rule(
        "descheduler",
        "LeaderElectionConfig._timings",
        "leaderElection",
        ("le", "leaderElection.renewDeadlineSeconds", ("mul", 1.2, "leaderElection.retryPeriodSeconds")),
        "renewDeadlineSeconds ({leaderElection.renewDeadlineSeconds:g}) must be > 1.2 x retryPeriodSeconds "
        "({leaderElection.retryPeriodSeconds:g})",
        _des({"leaderElection": {"renewDeadlineSeconds": 2.4, "retryPeriodSeconds": 2}}),
        _des({"leaderElection": {"renewDeadlineSeconds": 2.5, "retryPeriodSeconds": 2}}),
    ),
    Rule(
        "descheduler",
        "LeaderElectionConfig._timings",
        "leaderElection",
        ("le", "leaderElection.leaseDurationSeconds", "leaderElection.renewDeadlineSeconds"),
        "leaseDurationSeconds ({leaderElection.leaseDurationSeconds:g}) must be > renewDeadlineSeconds "
        "({leaderElection.renewDeadlineSeconds:g})",
        _des({"leaderElection": {"leaseDurationSeconds": 10}}, descheduler={"mode": "interval"}),
        _des({"leaderElection": {"leaseDurationSeconds": 11}}, descheduler={"mode": "interval"}),
    ),
)

#: Fields of the configuration files that the chart sets from its own values or wires to the objects it renders
#: (ports, probes, the Service, the scheduler's registration, mounted paths, RBAC on the Lease): component →
#: (dotted path in ``extender.config`` / ``descheduler.config``, the hint: what to set instead). The render fails
#: when one is given there, with one line naming both.
OWNED: dict[str, tuple[tuple[str, str], ...]] = {
    "extender": (
        ("listen.host", "the extender listens on every interface of its Pod"),
        ("listen.port", "set extender.port instead"),
        ("listen.healthPort", "set extender.healthPort instead"),
        ("listen.tls", "set tls.enabled and tls.secretName instead"),
        ("urlPrefix", "set extender.urlPrefix instead"),
    ),
    "descheduler": (
        ("stateFile", "the cronjob keeps its history on descheduler.persistence"),
        ("intervalSeconds", "set descheduler.intervalSeconds instead"),
        ("dryRun", "set descheduler.dryRun instead"),
        ("cooldownSeconds", "set descheduler.cooldownSeconds instead"),
        (
            "excludedNamespaces",
            "set descheduler.excludedNamespaces instead (kube-system and the release namespace are always excluded)",
        ),
        ("metrics.listen", "set descheduler.metricsPort instead"),
        ("metrics.pushgateway", "set metrics.pushgateway.url instead"),
        ("leaderElection.leaseName", "the chart's Role grants the descheduler this Lease only"),
        ("leaderElection.leaseNamespace", "the Lease is in the release namespace, where its Role is"),
    ),
}

#: Validators no rule states, and why the chart still refuses what they refuse.
COVERED = {
    "_health_port_differs": "listen.port and listen.healthPort are the chart's (OWNED): hrl.validate refuses "
    "extender.healthPort equal to extender.port",
    "_one_spelling_per_field": "a field given in both spellings (healthPort and health_port): the schema knows "
    "only the camelCase names (additionalProperties: false), so the snake_case one is refused",
}


#: The one-field validators of the two models (a field validator that reads no other field), by method name or
#: ``Model._method``, and how values.schema.json states each: the validator and the field's JSON Schema share one
#: pattern (:func:`policy.config.pattern_schema`) or the schema needs nothing. A new one fails gen-manifests until
#: it is listed here (:func:`uncovered`).
FIELD_CHECKS = {
    "_lists_for_tuples": "a conversion (YAML list to tuple), no check",
    "_bounded_seconds": "maximum: MAX_SECONDS on every *Seconds field (policy.config.json_schema)",
    "_upper": "a conversion (logLevel upper-cased), the enum is in the schema",
    "_finite": "helm values are JSON, which has no NaN or infinity",
    "CacheConfig._host_port": "pattern HOST_PORT on cache.address",
    "CacheConfig._cache_host_port": "pattern HOST_PORT on cache.address",
    "ScoreTableConfig._host_port": "pattern HOST_PORT on scoreTable.address",
    "ExtenderConfiguration._check_prefix": "pattern URL_PATH on urlPrefix (a chart-owned field: extender.urlPrefix)",
    "AutoscalerConfig._keys": "items pattern NAMESPACED_NAME on planner.autoscaler.workloads",
    "MetricsConfig._host_port": "pattern LISTEN_ADDRESS on metrics.listen (a chart-owned field)",
    "MetricsConfig._label_names": "propertyNames pattern and not job, values minLength 1 on metrics.groupingKey",
    "PlannerConfig._intent": "minItems/maxItems len(INTENT_SPEC), items minimum 0 on planner.intent",
    "_uri": "the chart's metricsSources.*.uri patterns (scheme only); the URI grammar is the loaders' (the chart's "
    "tests load every rendered configuration)",
}


def field_validators() -> list[tuple[str, str]]:
    """``(component, "Model._method")`` of every one-field validator of the two configurations."""
    out = []
    for component, root in MODELS.items():
        for model in _models(root):
            for n, d in model.__pydantic_decorators__.field_validators.items():
                if "info.data" not in inspect.getsource(d.func):
                    out.append((component, f"{model.__name__}.{n}"))
    return sorted(set(out))


# ---- which validators are cross-field --------------------------------------------------------------------------


def _submodels(annotation: Any) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from _submodels(arg)


def _models(root: type[BaseModel]) -> list[type[BaseModel]]:
    seen: list[type[BaseModel]] = []
    stack = [root]
    while stack:
        m = stack.pop()
        if m not in seen:
            seen.append(m)
            for f in m.model_fields.values():
                stack.extend(_submodels(f.annotation))
    return seen


def cross_field_validators() -> list[tuple[str, str]]:
    """``(component, "Model._method")`` of every check of the two configurations that may read more than one field:
    each model validator, and each field validator that reads ``info.data`` (the fields validated before it)."""
    out = []
    for component, root in MODELS.items():
        for model in _models(root):
            dec = model.__pydantic_decorators__
            names = list(dec.model_validators)
            names += [n for n, d in dec.field_validators.items() if "info.data" in inspect.getsource(d.func)]
            out += [(component, f"{model.__name__}.{n}") for n in names]
    return sorted(set(out))


def uncovered() -> list[str]:
    """Each cross-field validator that no rule states and :data:`COVERED` does not explain, and each one-field
    validator :data:`FIELD_CHECKS` does not list (empty: all are)."""
    stated = {(r.component, r.validator) for r in RULES}
    return [
        f"{component}: {name}"
        for component, name in cross_field_validators()
        if (component, name) not in stated and name.split(".")[-1] not in COVERED
    ] + [
        f"{component}: {name} (a one-field validator: FIELD_CHECKS)"
        for component, name in field_validators()
        if name not in FIELD_CHECKS and name.split(".")[-1] not in FIELD_CHECKS
    ]


# ---- the template ----------------------------------------------------------------------------------------------


def _field(model: type[BaseModel], key: str) -> tuple[str, Any]:
    for name, f in model.model_fields.items():
        if key in (f.alias, name):
            return name, f
    raise KeyError(f"{model.__name__} has no field {key!r}")


def default_at(component: str, path: str) -> Any:
    """The model's value at dotted ``path`` of a file that does not set it (sections' defaults included)."""
    model: type[BaseModel] | None = MODELS[component]
    value: Any = None
    parent: BaseModel | None = None
    for key in path.split("."):
        if model is None:
            return None
        name, f = _field(model, key)
        value = getattr(parent, name) if parent is not None else f.get_default(call_default_factory=True)
        model = next(_submodels(f.annotation), None)
        parent = value if isinstance(value, BaseModel) else None
    return {} if isinstance(value, BaseModel) else list(value) if isinstance(value, tuple) else value


def _literal(v: Any) -> str:
    """A Go template literal of a default."""
    if v is None:
        return "nil"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if v == {}:
        return "(dict)"
    raise ValueError(f"no template literal for {v!r}")


def _paths(node: Any) -> Iterator[str]:
    """The dotted paths a condition reads (an ``is``'s constant is not one)."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, tuple):
        for x in node[1:2] if node[0] in ("is", "set") else node[2:] if node[0] == "mul" else node[1:]:
            yield from _paths(x)


_PLACEHOLDER = re.compile(r"\{([A-Za-z0-9_.]+)(!r|:g|:d)?\}")
_COMPARE = {"gt": "gt", "ge": "ge", "lt": "lt", "le": "le", "eq": "eq"}


def _value(path: str) -> str:
    return f'(get $v "{path}")'


def _number(x: Any) -> str:
    if isinstance(x, str):
        return f"(float64 {_value(x)})"
    if isinstance(x, tuple) and x[0] == "mul":
        return f"(mulf {_literal(float(x[1]))} {_number(x[2])})"
    return f"(float64 {_literal(x)})"


def condition(c: tuple[Any, ...]) -> str:
    """The Go template expression of a rule's condition (module docstring)."""
    op = c[0]
    if op in _COMPARE:
        return f"({_COMPARE[op]} {_number(c[1])} {_number(c[2])})"
    if op == "is":
        want = ("true" if c[2] else "false") if isinstance(c[2], bool) else str(c[2])
        return f"(eq (toString {_value(c[1])}) {json.dumps(want)})"
    if op == "set":
        return f'(not (kindIs "invalid" {_value(c[1])}))'
    if op == "not":
        return f"(not {condition(c[1])})"
    if op in ("and", "or"):
        return f"({op} {' '.join(condition(x) for x in c[1:])})"
    raise ValueError(f"unknown condition {op!r}")


def _message(rule: Rule) -> str:
    """``fail (printf ...)`` of a rule: the loader's line with the component's values key for its file."""
    head = f"{rule.component}.config: " + (f"{rule.at}: " if rule.at else "")
    args = []

    def sub(m: re.Match[str]) -> str:  # as Python's format spec prints it: :g is %.6g, :d an integer, !r quoted
        spec = m[2] or ""
        args.append({":g": f"(float64 {_value(m[1])})", ":d": f"(int64 {_value(m[1])})"}.get(spec, _value(m[1])))
        return {":g": "%.6g", ":d": "%d", "!r": "'%v'"}.get(spec, "%v")

    fmt = _PLACEHOLDER.sub(sub, (head + rule.message).replace("%", "%%"))
    return f"fail (printf {json.dumps(fmt)}{''.join(' ' + a for a in args)})"


def _component_block(component: str) -> list[str]:
    """The checks of one component: ``$v``, each path its rules read → the rendered file's value there (the model's
    default where the file does not set it), then one ``if``/``fail`` per rule."""
    rules = [r for r in RULES if r.component == component]
    paths = sorted({p for r in rules for p in _paths(r.refuse)} | {m[1] for r in rules for m in
                   _PLACEHOLDER.finditer(r.message)})  # fmt: skip
    pairs = " ".join(f"(list {json.dumps(p)} {_literal(default_at(component, p))})" for p in paths)
    lines = [
        f'{{{{- $c := include "{TEMPLATES[component]}" . | fromYaml }}}}',
        "{{- $v := dict }}",
        f"{{{{- range $p := list {pairs} }}}}",
        "{{- $x := $c }}{{- $found := true }}",
        '{{- range $k := splitList "." (index $p 0) }}',
        '{{- if and $found (kindIs "map" $x) }}{{- if hasKey $x $k }}{{- $x = get $x $k }}'
        "{{- else }}{{- $found = false }}{{- end }}{{- else }}{{- $found = false }}{{- end }}",
        "{{- end }}",
        "{{- $_ := set $v (index $p 0) (ternary $x (index $p 1) $found) }}",
        "{{- end }}",
    ]
    for r in rules:
        lines += [f"{{{{- /* {r.validator} */}}}}", f"{{{{- if {condition(r.refuse)} }}}}",
                  f"{{{{- {_message(r)} }}}}", "{{- end }}"]  # fmt: skip
    return lines


def _owned_block(component: str) -> list[str]:
    """Fail when ``COMPONENT.config`` sets a field the chart owns (:data:`OWNED`)."""
    pairs = " ".join(f"(list {json.dumps(p)} {json.dumps(instead)})" for p, instead in OWNED[component])
    return [
        f"{{{{- $o := .Values.{component}.config | default dict }}}}",
        f"{{{{- range $p := list {pairs} }}}}",
        "{{- $x := $o }}{{- $found := true }}",
        '{{- range $k := splitList "." (index $p 0) }}',
        '{{- if and $found (kindIs "map" $x) (hasKey $x $k) }}{{- $x = get $x $k }}{{- else }}{{- $found = false }}'
        "{{- end }}",
        "{{- end }}",
        "{{- if $found }}",
        f'{{{{- fail (printf "{component}.config.%s: set by the chart, not here; %s" (index $p 0) (index $p 1)) }}}}',
        "{{- end }}",
        "{{- end }}",
    ]


def template() -> str:
    """templates/_validate.tpl: ``hrl.validateConfigs``, included by ``hrl.validate``."""
    lines = [
        "{{/* GENERATED by hack/gen-manifests.py from hack/chart_rules.py; do not edit.",
        "The cross-field checks of ExtenderConfiguration and DeschedulerConfiguration (the models' validators) on the",
        "configuration files the chart renders (the generated file with extender.config / descheduler.config merged",
        "over it; an unset field has the model's default): each fails the render with the component's own line.",
        "First: the fields the chart owns (OWNED) are refused in extender.config / descheduler.config. */}}",
        '{{- define "hrl.validateConfigs" -}}',
        *_owned_block("extender"),
        *_component_block("extender"),
        "{{- if .Values.descheduler.enabled }}",
        *_owned_block("descheduler"),
        *_component_block("descheduler"),
        "{{- end }}",
        "{{- end -}}",
    ]
    return "\n".join(lines) + "\n"
