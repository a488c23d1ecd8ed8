"""The inference benchmark's plot: throughput and ITL against concurrency, a row per device."""

from pathlib import Path

from .inference_table import LLAMA_CPP_F32, OURS, SYSTEM_NAMES, Results, llama_cpp_system
from .report import BENCH_DIR

PLOT_PATH = BENCH_DIR / "inference.png"


def _ms_or_none(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def write_plot(results: Results, path: Path = PLOT_PATH) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    runs = results.runs
    figure, axes = plt.subplots(len(runs), 2, figsize=(11, 4 * len(runs)), squeeze=False)
    styles = {OURS: ("tab:blue", "o"), LLAMA_CPP_F32: ("tab:red", "v"),
              llama_cpp_system("bf16"): ("tab:pink", "<"),
              llama_cpp_system("f16"): ("tab:purple", "P"),
              llama_cpp_system("q8_0"): ("tab:brown", "X"), "hf-manager": ("tab:orange", "s"),
              "static-batch": ("tab:green", "^"), "hf-generate": ("tab:gray", "D")}
    for row, run in zip(axes, runs):
        throughput, latency = row
        for system in styles:
            levels = sorted((l for l in run.levels if l.system == system),
                            key=lambda l: l.concurrency)
            if not levels:
                continue
            color, marker = styles[system]
            x = [l.concurrency for l in levels]
            summaries = [l.summary() for l in levels]
            p50 = [_ms_or_none(s["itl_s"]["p50"]) for s in summaries]
            p99 = [_ms_or_none(s["itl_s"]["p99"]) for s in summaries]
            if system == "hf-generate":  # one request at a time: a level, not a curve
                throughput.axhline(summaries[0]["output_tokens_per_s"], color=color, linestyle=":",
                                   label=SYSTEM_NAMES[system])
            else:
                throughput.plot(x, [s["output_tokens_per_s"] for s in summaries], marker=marker,
                                color=color, label=SYSTEM_NAMES[system])
            latency.plot(x, p50, marker=marker, color=color, label=SYSTEM_NAMES[system])
            latency.plot(x, p99, marker=marker, color=color, linestyle="--", alpha=0.7)
        concurrencies = sorted({l.concurrency for l in run.levels})
        for axis in row:
            axis.set_xscale("log", base=2)
            axis.set_xticks(concurrencies, [str(c) for c in concurrencies])
            axis.set_xlabel("concurrent streams (static batch: batch size)")
            axis.grid(True, alpha=0.3)
        throughput.set_ylabel("output tokens/s")
        throughput.set_title(f"{run.label}: aggregate output throughput")
        latency.set_yscale("log")
        latency.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1, 2, 5)))
        latency.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        latency.yaxis.set_minor_formatter(ticker.NullFormatter())
        latency.set_ylabel("inter-token latency, ms")
        latency.set_title(f"{run.label}: ITL p50 (solid) and p99 (dashed)")
        throughput.legend(fontsize=8)
        latency.legend(fontsize=7)
    mode = "QUICK smoke run, not representative" if results.plan.get("quick") else "full run"
    figure.suptitle(f"SmolLM2-135M-Instruct fp32, {results.plan['threads']} threads, {mode}",
                    fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)
    # The plot is committed: a 256-colour palette makes it about three times smaller, same look.
    from PIL import Image

    with Image.open(path) as image:
        image.convert("RGB").quantize(colors=256).save(path, optimize=True)
    return path
