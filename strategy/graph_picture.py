"""The operator graph as a PNG drawn with matplotlib, for machines without Graphviz
(`draw_png`): the same boxes, colours and legend as the DOT file (strategy/views.py
graph_style), laid out in layers from the inputs down (an operator one layer below the
deepest of its producers), edges as straight lines.

    draw_png("alexnet.png", model, graph_style(model, configs), edges(model))
"""
from __future__ import annotations

BOX_W, BOX_H = 2.4, 0.75          # inches per box, with room around it
MAX_INCHES = 300                  # a side of the figure at most (tall models)


def layers(model, edge_pairs) -> dict[str, int]:
    """Operator name -> its layer: 0 for operators fed by inputs only, else one more than
    its deepest producer (model order is a topological order)."""
    producers: dict[str, list[str]] = {}
    for src, dst in edge_pairs:
        producers.setdefault(dst, []).append(src)
    depth: dict[str, int] = {}
    for op in model.ops:
        depth[op.name] = 1 + max((depth[p] for p in producers.get(op.name, [])), default=-1)
    return depth


def draw_png(path: str, model, style, edges: dict) -> None:
    """Write the picture of `model`'s operator graph to `path` (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch, Patch

    depth = layers(model, edges)
    rows: dict[int, list[str]] = {}
    for op in model.ops:
        rows.setdefault(depth[op.name], []).append(op.name)
    width = max(len(r) for r in rows.values())
    xy = {name: (i - (len(names) - 1) / 2, -d)
          for d, names in rows.items() for i, name in enumerate(names)}
    fig_w = min(MAX_INCHES, max(6.0, BOX_W * width))
    fig_h = min(MAX_INCHES, max(3.0, BOX_H * (len(rows) + 1)))
    fig, ax = plt.subplots(figsize=(fig_w, fig_h))
    for (src, dst) in edges:
        (x0, y0), (x1, y1) = xy[src], xy[dst]
        ax.plot([x0, x1], [y0, y1], color="#888888", linewidth=0.6, zorder=1)
    for name, (x, y) in xy.items():
        ax.add_patch(FancyBboxPatch((x - 0.42, y - 0.3), 0.84, 0.6,
                                    boxstyle="round,pad=0.02", facecolor=style.fill[name],
                                    edgecolor="#444444", linewidth=0.6, zorder=2))
        ax.text(x, y, style.text[name], ha="center", va="center", fontsize=5, zorder=3)
    ax.set_xlim(-width / 2 - 0.5, width / 2 + 0.5)
    ax.set_ylim(-len(rows), 1)
    ax.axis("off")
    ax.set_title(f"{model.name}: operators coloured by the devices they run on")
    ax.legend(handles=[Patch(facecolor=fill, edgecolor="#444444",
                             label=f"{name}: {n} op{'s' if n > 1 else ''}")
                       for name, n, fill in style.legend],
              loc="upper right", fontsize=7, title="devices")
    fig.savefig(path, dpi=100 if max(fig_w, fig_h) < 60 else 50, bbox_inches="tight")
    plt.close(fig)
