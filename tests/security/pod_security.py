"""The Kubernetes Pod Security Standards, "baseline" and "restricted" profiles, as one pure function.

Written from the Pod Security Standards page (kubernetes.io/docs/concepts/security/pod-security-standards,
policy version 1.30): each rule below names its control. Only Linux pods; Windows-only controls are
checked where they apply to any pod (hostProcess).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
SECCOMP_ALLOWED = {"RuntimeDefault", "Localhost"}


def _containers(pod: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for container in pod.get(field) or []:
            yield f"{field}[{container.get('name')}]", container


def _bad_selinux(options: dict[str, Any] | None) -> bool:
    return bool(options) and (
        options.get("type", "") not in SELINUX_TYPES  # type: ignore[union-attr]
        or bool(options.get("user"))
        or bool(options.get("role"))
    )  # type: ignore[union-attr]


def _baseline_pod(pod: dict[str, Any]) -> Iterator[str]:
    pod_ctx = pod.get("securityContext") or {}
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            yield f"Host Namespaces: {field} is true"
    if (pod_ctx.get("windowsOptions") or {}).get("hostProcess"):
        yield "HostProcess: pod windowsOptions.hostProcess"
    for volume in pod.get("volumes") or []:
        if "hostPath" in volume:
            yield f"HostPath Volumes: volume {volume.get('name')}"
    if _bad_selinux(pod_ctx.get("seLinuxOptions")):
        yield f"SELinux: pod seLinuxOptions {pod_ctx['seLinuxOptions']}"
    if (pod_ctx.get("seccompProfile") or {}).get("type") == "Unconfined":
        yield "Seccomp: pod profile Unconfined"
    for sysctl in pod_ctx.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            yield f"Sysctls: {sysctl.get('name')} is not in the safe set"


def _baseline_containers(pod: dict[str, Any]) -> Iterator[str]:
    for where, container in _containers(pod):
        ctx = container.get("securityContext") or {}
        if ctx.get("privileged"):
            yield f"Privileged Containers: {where}"
        if (ctx.get("windowsOptions") or {}).get("hostProcess"):
            yield f"HostProcess: {where}"
        added = set((ctx.get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            yield f"Capabilities: {where} adds {sorted(added - BASELINE_CAPABILITIES)}"
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                yield f"Host Ports: {where} hostPort {port['hostPort']}"
        if ctx.get("procMount", "Default") != "Default":
            yield f"/proc Mount Type: {where} {ctx['procMount']}"
        yield from _baseline_profiles(where, ctx)


def _baseline_profiles(where: str, ctx: dict[str, Any]) -> Iterator[str]:
    """SELinux, AppArmor and seccomp of one container."""
    if _bad_selinux(ctx.get("seLinuxOptions")):
        yield f"SELinux: {where} {ctx['seLinuxOptions']}"
    apparmor = (ctx.get("appArmorProfile") or {}).get("type")
    if apparmor not in (None, "RuntimeDefault", "Localhost"):
        yield f"AppArmor: {where} {apparmor}"
    if (ctx.get("seccompProfile") or {}).get("type") == "Unconfined":
        yield f"Seccomp: {where} profile Unconfined"


def _restricted(pod: dict[str, Any]) -> Iterator[str]:
    pod_ctx = pod.get("securityContext") or {}
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            yield f"Volume Types: volume {volume.get('name')} is {sorted(kinds)}"
    if pod_ctx.get("runAsUser") == 0:
        yield "Running as Non-root user: pod runAsUser is 0"
    pod_seccomp = (pod_ctx.get("seccompProfile") or {}).get("type")
    yield from _restricted_containers(pod, pod_ctx, pod_seccomp)


def _restricted_containers(
    pod: dict[str, Any],
    pod_ctx: dict[str, Any],
    pod_seccomp: str | None,
) -> Iterator[str]:
    for where, container in _containers(pod):
        ctx = container.get("securityContext") or {}
        if ctx.get("allowPrivilegeEscalation") is not False:
            yield f"Privilege Escalation: {where} allowPrivilegeEscalation is not false"
        non_root = ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot"))
        if non_root is not True:
            yield f"Running as Non-root: {where} runAsNonRoot is not true (pod or container)"
        if ctx.get("runAsUser") == 0:
            yield f"Running as Non-root user: {where} runAsUser is 0"
        seccomp = (ctx.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in SECCOMP_ALLOWED:
            yield f"Seccomp: {where} has no RuntimeDefault or Localhost profile"
        capabilities = ctx.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            yield f"Capabilities: {where} does not drop ALL"
        if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            yield f"Capabilities: {where} adds more than NET_BIND_SERVICE"


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """Every rule of the restricted profile (which includes baseline) that this PodSpec breaks."""
    return [*_baseline_pod(pod), *_baseline_containers(pod), *_restricted(pod)]
