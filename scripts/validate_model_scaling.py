"""Check the roofline scaling of operator times across models, on the A100's two profiles.

Usage (from the repository root):

    .venv/bin/python scripts/validate_model_scaling.py

Predicts Llama-2-7B's measured operator times from Llama-3-8B's (and the reverse) with a
roofline fitted to the source profile alone (`sim/hardware/crossmodel.py`), and prints the
relative error of the per-layer non-attention time per TP degree and batch-size band as a
Markdown table (the README's), then the median over everything. Reads the embedded tables;
needs no data outside the repository.
"""

from __future__ import annotations

from slidingserve.sim.hardware.crossmodel import cross_model_errors, error_table, overall_median
from slidingserve.sim.hardware.profiles import builtin_profile


def main() -> None:
    llama3, llama2 = builtin_profile("a100").tables
    errors = cross_model_errors(llama3, llama2) + cross_model_errors(llama2, llama3)
    print(error_table(errors))
    print()
    for source, target in ((llama3, llama2), (llama2, llama3)):
        median = overall_median(source, target)
        print(f"{target.label} from {source.label}: median error {median:.1%} over all sizes")


if __name__ == "__main__":
    main()
