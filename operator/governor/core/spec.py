"""The InferenceService API (group ``governor.vllm.ai``, version ``v1alpha1``): spec and status models.

One source of truth: the CRD in ``crds/`` is generated from these models (``python -m governor.crd``), the
operator parses every object through them, and the control loop reads :class:`Resolved` values.

Choices where the issue was silent:

* Optional numbers the GPU profile can fill (``engine.maxNumSeqs``, ``adaptive.initialCap`` …) are ``None`` in
  the object and resolved by :meth:`InferenceServiceSpec.resolve`; the CRD carries no server-side defaults,
  so ``kubectl get -o yaml`` shows what the user wrote and ``status`` shows what the operator chose
  (``status.ceiling``, ``status.cap``).
* ``adaptive.enabled`` defaults to "on when ``spec.slo`` is set": the loop needs a target to hold.
* Unknown fields are errors (a typo such as ``maxNumSeq`` must not be silently dropped).
* ``modelSizeClass`` picks the profile row; when absent it is guessed from a parameter count in the model
  name ("…-70B" → large), else small.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from governor.core import profiles
from governor.core.law.registry import DEFAULT_LAW, LawName
from governor.core.signals import LONG_PROMPT_FACTOR, LatencyKind

GROUP = "governor.vllm.ai"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "InferenceService"
PLURAL = "inferenceservices"
SINGULAR = "inferenceservice"
SHORT_NAMES = ("gisvc",)  # KServe owns `isvc`; both CRDs can be installed side by side
CATEGORIES = ("governor",)

DEFAULT_IMAGE = "ghcr.io/vllm-governor/runtime:0.1.0"
HTTP_PORT = 8000
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
MAX_NAME_LENGTH = 63 - len("-admin-token")  # the longest child name must stay a valid label-sized name
# Not empty, no leading or trailing whitespace: a blank model, image or claim name is always a mistake, and
# the pattern lands in the CRD so the API server refuses it too.
NONBLANK_PATTERN = r"^\S(.*\S)?$"
NonBlank = Annotated[str, StringConstraints(pattern=NONBLANK_PATTERN)]


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
    )


def _quantity(value: str | None) -> str | None:
    if value is not None and not _QUANTITY.match(value):
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 16Gi, 500m, 2)")
    return value


class Toleration(_Model):
    key: NonBlank | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: NonBlank | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _check(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("a toleration with operator Exists must not have a value")
        if self.operator == "Equal" and not self.key:
            raise ValueError("a toleration with operator Equal needs a key")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds only applies to effect NoExecute")
        return self


class GPU(_Model):
    count: int = Field(default=1, ge=0, le=16)
    """GPUs per replica (nvidia.com/gpu limit). 0 runs on CPU."""
    type: NonBlank | None = None
    """GPU model, e.g. H200, H100, A100-80GB, L40S, L4; selects the profile row for defaults."""


class Resources(_Model):
    gpu: GPU = GPU()
    cpu: str | None = None
    """CPU request, e.g. "8"."""
    cpu_limit: str | None = None
    """CPU limit. Default: none (throttling stalls vLLM's scheduler thread: the latency the cap governs)."""
    memory: str | None = None
    """Memory request and limit, e.g. "64Gi"."""
    shm_size: str = "16Gi"
    """Size of the in-memory /dev/shm volume (NCCL and the engine's IPC need it)."""
    node_selector: dict[str, NonBlank] = {}
    tolerations: list[Toleration] = []

    _cpu = field_validator("cpu", "cpu_limit", "memory", "shm_size")(_quantity)

    @field_validator("node_selector")
    @classmethod
    def _selector_keys(cls, value: dict[str, str]) -> dict[str, str]:
        if any(not re.match(NONBLANK_PATTERN, key) for key in value):
            raise ValueError("a nodeSelector key must not be blank")
        return value


class ModelCache(_Model):
    pvc_name: NonBlank | None = None
    """An existing PersistentVolumeClaim for the model cache; an emptyDir when unset."""
    size_limit: str | None = None
    """emptyDir size limit (only without pvcName)."""

    _size = field_validator("size_limit")(_quantity)


class Engine(_Model):
    """vLLM startup arguments. maxNumSeqs is the ceiling: the live cap never goes above it."""

    max_model_len: int | None = Field(default=None, ge=16)
    max_num_seqs: int | None = Field(default=None, ge=1, le=4096)
    """The ceiling. Default: the GPU profile's."""
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    block_size: Literal[1, 8, 16, 32, 64, 128] | None = None
    tensor_parallel_size: int = Field(default=1, ge=1, le=16)
    dtype: Literal["auto", "half", "float16", "bfloat16", "float", "float32"] | None = None
    extra_args: list[NonBlank] = []
    """More vLLM OpenAI server flags, passed as given (not the ones that have a field here)."""


class SLO(_Model):
    kind: LatencyKind = LatencyKind.TPOT
    """tpot (per request mean decode gap; the signal the cap governs), interToken, ttft or e2e."""
    quantile: float = Field(default=0.99, gt=0, lt=1)
    target_ms: float = Field(gt=0, le=3_600_000)
    """The latency the quantile must stay under, in milliseconds."""
    ttft_ms: float | None = Field(default=None, gt=0, le=3_600_000)
    """Optional TTFT bound (ms) a request must also meet to count as goodput. With a per-token kind, a TTFT
    quantile above it while a queue waits behind a binding cap asks for a replica; the levers law also
    weighs it in the cap: where no cap meets both bounds it gives up the per-token one and raises the cap for
    the queue (the rule table does not move the cap for it)."""


class LongTailMode(_Model):
    enabled: bool = True
    """The rule table's long-tail mode (`law: rules`, rule 11). The levers law runs without it: its fitted
    lines say where the SLO breaks (README, "The levers law")."""
    cap_fraction: float = Field(default=0.25, gt=0, le=1)
    """Cap ceiling in long-tail mode as a fraction of the ceiling (the seed's 256 → 64)."""
    prompt_factor: float = Field(default=LONG_PROMPT_FACTOR, gt=1)
    """A prompt longer than this × the windowed prompt P95 counts as long (the runtime counts them)."""


class BurstMode(_Model):
    enabled: bool = True
    ticks: int = Field(default=3, ge=1)
    """Consecutive ticks of rising request rate before a pre-emptive decrease."""


class Adaptive(_Model):
    enabled: bool | None = None
    """Default: on when spec.slo is set."""
    min_cap: int = Field(default=1, ge=1)
    max_cap: int | None = Field(default=None, ge=1)
    """Default: the ceiling (engine.maxNumSeqs)."""
    initial_cap: int | None = Field(default=None, ge=1)
    """Default: from the GPU profile and the SLO."""
    tick_seconds: float = Field(default=5.0, ge=1, le=3600)
    """How often the loop decides; at least 1 s (a read, a quantile and a PUT per pod fit in a tick)."""
    window_seconds: float = Field(default=60.0, ge=1, le=86400)
    """The latency window each decision reads; at least one tick (a cross-field rule)."""
    decrease_factor: float = Field(default=0.8, gt=0, lt=1)
    increase_factor: float = Field(default=1.15, gt=1, le=4)
    band: float = Field(default=0.1, ge=0, lt=1)
    """Hysteresis: no change while the smoothed P99 is within ±band of the target."""
    ewma_alpha: float = Field(default=0.3, gt=0, le=1)
    cooldown_seconds: float = Field(default=15.0, ge=0, le=86400)
    """After a decrease, wait this long before the next one (running requests drain first)."""
    long_tail: LongTailMode = LongTailMode()
    burst: BurstMode = BurstMode()
    law: LawName = DEFAULT_LAW
    """rules: the rule table; levers: the computed law, which learns what the cap does (README, "The law")."""


class Autoscaling(_Model):
    enabled: bool = False
    mode: Literal["planner", "external"] = "planner"
    """planner: the governor writes replicas. external: HPA/KEDA drive the scale subresource."""
    min_replicas: int = Field(default=1, ge=0)
    max_replicas: int = Field(default=4, ge=1)
    alert_driven: bool = True
    """Alertmanager notifications may ask for replicas."""
    scale_up_cooldown_seconds: float = Field(default=120.0, ge=0, le=86400)
    """0 disables the cooldown (tests, small models that start in seconds)."""
    scale_down_cooldown_seconds: float = Field(default=600.0, ge=0, le=86400)


class Monitoring(_Model):
    pod_monitor: Literal["auto", "enabled", "disabled"] = "auto"
    """auto: a PodMonitor when monitoring.coreos.com is installed, else prometheus.io scrape annotations."""
    interval: str = Field(default="15s", pattern=r"^[0-9]+(ms|s|m|h)$")
    """Scrape interval of the PodMonitor, from 1s to 1h."""

    @field_validator("interval")
    @classmethod
    def _interval_bounds(cls, value: str) -> str:
        match = re.fullmatch(r"([0-9]+)(ms|s|m|h)", value)
        if match is None:  # the pattern already refused it
            return value
        seconds = int(match[1]) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[match[2]]
        if not 1 <= seconds <= 3600:
            raise ValueError(
                f"{value} is outside 1s..1h: Prometheus cannot scrape a busy engine that often,"
                " and a longer interval leaves the loop without data"
            )
        return value


class NetworkPeer(_Model):
    """Pods chosen by their labels and their namespace's labels, or an address range (not both)."""

    pod_labels: dict[str, NonBlank] | None = None
    """Unset: every pod of the chosen namespaces."""
    namespace_labels: dict[str, NonBlank] | None = None
    """Unset: the InferenceService's own namespace; {} every namespace."""
    cidr: NonBlank | None = None
    """An address range, e.g. 10.0.0.0/8 (clients outside the cluster, a load balancer's sources)."""

    @model_validator(mode="after")
    def _check(self) -> NetworkPeer:
        labels = self.pod_labels is not None or self.namespace_labels is not None
        if self.cidr is not None:
            if labels:
                raise ValueError("a network peer has either cidr or labels, not both")
            try:
                ipaddress.ip_network(self.cidr)
            except ValueError as error:
                raise ValueError(f"cidr {self.cidr!r} is not an address range: {error}") from None
        elif not labels:
            raise ValueError("a network peer needs podLabels, namespaceLabels or cidr")
        return self


PROMETHEUS_PODS = NetworkPeer(pod_labels={"app.kubernetes.io/name": "prometheus"}, namespace_labels={})


class NetworkPolicy(_Model):
    """Ingress to the engines' one port (API, /metrics and admin route alike; docs/security.md)."""

    enabled: bool = True
    clients: list[NetworkPeer] | None = None
    """Who may call the API. Unset: anyone reaches port 8000. Set: them, the operator and the scrapers."""
    scrapers: list[NetworkPeer] = [PROMETHEUS_PODS]
    """Who may scrape /metrics when clients is set. Default: app.kubernetes.io/name=prometheus pods."""


class Disruption(_Model):
    max_unavailable: int = Field(default=1, ge=0)


class Resolved(BaseModel):
    """Concrete values after the GPU profile filled what the user left out."""

    model_config = ConfigDict(frozen=True)

    ceiling: int
    initial_cap: int
    min_cap: int
    max_cap: int
    adaptive: bool
    gpu: str
    size: profiles.ModelSize
    profile_source: str
    served_model_name: str


class InferenceServiceSpec(_Model):
    model: NonBlank
    """Hugging Face model id or a path inside the model cache."""
    served_model_name: NonBlank | None = None
    """Name clients use; default: spec.model."""
    model_size_class: profiles.ModelSize | None = None
    """small (≤10B), medium (≤40B) or large; picks the GPU profile row. Default: guessed from spec.model."""
    replicas: int = Field(default=1, ge=0, le=1000)
    image: NonBlank = DEFAULT_IMAGE
    """Runtime image; pin it by digest (repo@sha256:...) in production."""
    resources: Resources = Resources()
    model_cache: ModelCache = ModelCache()
    engine: Engine = Engine()
    slo: SLO | None = None
    adaptive: Adaptive = Adaptive()
    autoscaling: Autoscaling = Autoscaling()
    monitoring: Monitoring = Monitoring()
    disruption: Disruption = Disruption()
    network_policy: NetworkPolicy = NetworkPolicy()

    @model_validator(mode="after")
    def _cross_field(self) -> InferenceServiceSpec:
        from governor.core.spec_rules import cross_field_problems  # the rules read the models

        problems = cross_field_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def profile(self) -> profiles.Profile:
        size = self.model_size_class or profiles.guess_size(self.model)
        gpu = self.resources.gpu.type if self.resources.gpu.count > 0 else (self.resources.gpu.type or "CPU")
        return profiles.lookup(gpu, size)

    def resolve(self) -> Resolved:
        profile = self.profile()
        ceiling = self.engine.max_num_seqs or profile.ceiling
        max_cap = min(self.adaptive.max_cap or ceiling, ceiling)
        min_cap = min(self.adaptive.min_cap, max_cap)
        tpot_ms = self.slo.target_ms if self.slo and self.slo.kind == LatencyKind.TPOT else None
        adaptive = self.adaptive.enabled if self.adaptive.enabled is not None else self.slo is not None
        # Static (no loop): the cap stays where it starts, so start at the top unless the user chose a value.
        initial = self.adaptive.initial_cap or (profile.initial_cap(tpot_ms) if adaptive else max_cap)
        return Resolved(
            ceiling=ceiling,
            initial_cap=max(min_cap, min(initial, max_cap)),
            min_cap=min_cap,
            max_cap=max_cap,
            adaptive=adaptive,
            gpu=profile.gpu,
            size=profile.size,
            profile_source=profile.source,
            served_model_name=self.served_model_name or self.model,
        )


def name_problems(name: str) -> list[str]:
    """The InferenceService name becomes Service and Deployment names, so it must be a DNS-1035 label."""
    if len(name) > MAX_NAME_LENGTH:
        return [
            f"metadata.name is {len(name)} characters; at most {MAX_NAME_LENGTH} fit the children's names"
        ]
    if not _DNS1035.match(name):
        return [
            f"metadata.name {name!r} must start with a letter and hold only a-z, 0-9 and '-'"
            " (it names a Service)"
        ]
    return []


def describe(error: ValidationError) -> str:
    """One line per problem, each with its field path under spec, e.g. 'spec.slo.quantile: …'."""
    lines = []
    for item in error.errors(include_url=False):
        path = ".".join(str(part) for part in ("spec", *item["loc"]))
        message = str(item["msg"]).removeprefix("Value error, ")
        if (item.get("ctx") or {}).get("pattern") == NONBLANK_PATTERN:
            message = "must not be empty or start or end with whitespace"
        if item["type"] == "extra_forbidden":
            message = "unknown field (check the spelling; the CRD lists the accepted fields)"
        elif item["type"] == "missing":
            message = "required field is missing"
        elif item["type"] not in ("value_error", "model_type"):
            message = f"{message} (got {item['input']!r})"
        lines.append(f"{path}: {message}")
    return "; ".join(lines)


def parse_spec(raw: Any) -> InferenceServiceSpec:
    """Parse a spec from the API (camelCase). Raises ValidationError."""
    return InferenceServiceSpec.model_validate(raw if raw is not None else {})
