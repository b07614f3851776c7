"""What a platform team lets a model's pods hold beyond what the CRD refuses for every
install: another ServiceAccount's identity, Secret volumes, projected volumes (which mint
ServiceAccount tokens for any audience), a model cache in a node's directory. The
operator refuses a model asking for more before applying any child, and `specfleet
validate` given the same allowances (the chart's podPolicy values, the operator's flags)
refuses it in the same words."""

from __future__ import annotations

from dataclasses import dataclass

from specfleet.operator.api import SpeculativeModelSpec

# Volume sources that hand the pods credentials: a Secret's keys, or (projected) Secrets
# and ServiceAccount tokens.
CREDENTIAL_VOLUMES = ("secret", "projected")


@dataclass(frozen=True)
class PodPolicy:
    """The allowances; the default allows neither."""

    service_accounts: frozenset[str] = frozenset()
    secret_volumes: bool = False
    host_path_cache: bool = False

    def refusals(self, spec: SpeculativeModelSpec) -> list[str]:
        """Each field the policy refuses, named, with the fix."""
        pod = spec.runtime.pod
        found = []
        account = pod.service_account_name
        if account not in (None, "default", *self.service_accounts):
            allowed = ", ".join(sorted(self.service_accounts)) or "none besides default"
            found.append(
                f"spec.runtime.pod.serviceAccountName: {account!r} is not a ServiceAccount "
                f"this operator's install lets models run as ({allowed}: the chart's "
                "podPolicy.serviceAccounts); remove it to run as the namespace's default"
            )
        for index, volume in enumerate(pod.volumes):
            source = next((s for s in CREDENTIAL_VOLUMES if s in volume.sources()), None)
            if source is not None and not self.secret_volumes:
                found.append(
                    f"spec.runtime.pod.volumes[{index}].{source}: this operator's install "
                    "allows no Secret or projected volumes (the chart's "
                    "podPolicy.secretVolumes); a Hugging Face token is "
                    "runtime.hfTokenSecretRef"
                )
        if spec.runtime.model_cache.host_path is not None and not self.host_path_cache:
            found.append(
                "spec.runtime.modelCache.hostPath: this operator's install allows no model "
                "cache in a node's directory (the chart's podPolicy.hostPathCache): a "
                "hostPath may be any of the node's files; use modelCache.claimName"
            )
        return found


NOTHING_MORE = PodPolicy()  # the chart's default
