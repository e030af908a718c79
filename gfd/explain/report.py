"""How ``gfd explain``'s verdicts and ``gfd select``'s affinity are written: text for a
person (one block per node, each reason with the node's value and the fix, then the
summary line), JSON with the same facts for a program, YAML for a manifest."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gfd.scheduling.judge import Explanation, NodeVerdict, summary_line
from gfd.scheduling.quantity import show_units


def _requests_text(requests: Mapping[str, int]) -> str:
    if not requests:
        return "nothing"
    return ", ".join(f"{name}: {show_units(name, units)}" for name, units in requests.items())


def _verdict_word(verdict: NodeVerdict) -> str:
    if not verdict.fits:
        return "does not fit"
    if verdict.cuda is not None and not verdict.cuda.ok:
        return "fits, but the container would not start"
    return "fits"


def explanation_text(explanation: Explanation) -> str:
    lines = [
        f"{explanation.workload.title}: requests {_requests_text(explanation.requests)}",
    ]
    if explanation.needed_cuda is not None:
        major, minor = explanation.needed_cuda
        lines.append(f"needs CUDA {major}.{minor} ({explanation.cuda_source})")
    elif explanation.cuda_source:
        lines.append(explanation.cuda_source)
    lines.append("")
    for verdict in explanation.verdicts:
        lines.append(f"{verdict.node}: {_verdict_word(verdict)}")
        for miss in verdict.misses:
            lines.append(f"  - {miss.reason}: {miss.detail}")
            lines.append(f"    fix: {miss.fix}")
        if verdict.cuda is not None:
            mark = "ok" if verdict.cuda.ok else "no"
            lines.append(f"  - CUDA {mark}: {verdict.cuda.detail}")
            if verdict.cuda.fix:
                lines.append(f"    fix: {verdict.cuda.fix}")
        for note in verdict.notes:
            lines.append(f"  - note: {note}")
    if not explanation.verdicts:
        lines.append("no node to judge")
    if explanation.not_judged:
        lines.append("")
        lines.append("not judged (gfd does not check these; the scheduler does):")
        lines += [f"  - {item}" for item in explanation.not_judged]
    lines.append("")
    lines.append(summary_line(explanation))
    if explanation.needed_cuda is not None:
        lines.append(cuda_line(explanation))
    return "\n".join(lines) + "\n"


def cuda_line(explanation: Explanation) -> str:
    """After the scheduler's view, where the container would also start."""
    major, minor = explanation.needed_cuda or (0, 0)
    fitting = [v for v in explanation.verdicts if v.fits]
    running = [v.node for v in fitting if v.runs]
    short = [v.node for v in fitting if not v.runs]
    if running:
        return f"With CUDA {major}.{minor} it would start on: {', '.join(running)}."
    if short:
        return (
            f"It would start on no node: where it fits ({', '.join(short)}), the driver "
            f"lacks CUDA {major}.{minor}."
        )
    return "It would start on no node."


def explanation_json(explanation: Explanation) -> dict[str, Any]:
    def cuda(verdict: NodeVerdict) -> dict[str, Any] | None:
        if verdict.cuda is None:
            return None
        node = verdict.cuda.node
        return {
            "needed": "{}.{}".format(*verdict.cuda.needed),
            "node": f"{node[0]}.{node[1]}" if node else None,
            "ok": verdict.cuda.ok,
            "detail": verdict.cuda.detail,
            "fix": verdict.cuda.fix,
        }

    return {
        "kind": explanation.workload.kind,
        "namespace": explanation.workload.namespace,
        "name": explanation.workload.name,
        "requests": dict(explanation.requests),
        "needsCuda": "{}.{}".format(*explanation.needed_cuda) if explanation.needed_cuda else None,
        "cudaSource": explanation.cuda_source,
        "nodes": [
            {
                "name": v.node,
                "gpuNode": v.gpu_node,
                "fits": v.fits,
                "runs": v.runs,
                "reasons": [
                    {"filter": m.filter, "reason": m.reason, "detail": m.detail, "fix": m.fix}
                    for m in v.misses
                ],
                "notes": list(v.notes),
                "cuda": cuda(v),
            }
            for v in explanation.verdicts
        ],
        "nodesLeftOut": explanation.left_out,
        "notJudged": list(explanation.not_judged),
        "summary": summary_line(explanation),
    }


def explanations_json(explanations: Sequence[Explanation]) -> str:
    return json.dumps([explanation_json(e) for e in explanations], indent=2) + "\n"


def yaml_text(document: Any) -> str:
    import yaml

    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=100)
