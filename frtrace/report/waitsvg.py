"""The wait graph as inline SVG: who waits on whom, compressed for thousands of ranks.

Ranks that others wait on are drawn one circle each (culprits red, suspected ones dashed).
Ranks that only wait are drawn as boxes, one box per set of ranks waiting on the same ranks for
the same reason, so 4,095 ranks waiting on rank 5 are one box and one arrow. Columns go right
to left from the root causes: a box's column is one more than the furthest rank it waits on.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from html import escape

import networkx as nx

from frtrace.base.ranges import format_ranks
from frtrace.model import Report
from frtrace.report.common import compact_ranks, plural

__all__ = ["render_waitgraph_svg"]

COL_PX = 235
NODE_GAP = 54
MAX_PER_COLUMN = 12
MAX_COLUMNS = 5
BOX_W, BOX_H, RADIUS = 185, 36, 17
CAPTION = (  # above the graph, a line each: the SVG is made as wide as the longest
    "an arrow points from the waiting ranks to the ranks they wait on;",
    "circles: ranks others wait on, boxes: ranks that only wait",
)
CAPTION_LINE_PX = 14


@dataclass(frozen=True, slots=True, kw_only=True)
class _Node:
    key: str
    ranks: tuple[int, ...]
    layer: int
    is_rank: bool  # a single rank others wait on (circle), else a box of waiters


def _nodes(report: Report) -> tuple[list[_Node], list[tuple[str, str, str]]]:
    """Circles for the root causes, boxes for everything else, and the arrows between them.

    The roots are the ranks of the graph's sinks (a cycle of roots is a deadlock). Every other
    rank goes into a box with the ranks at the same distance from the roots that wait on the
    same nodes for the same reason; boxes are built from the roots outwards.
    """
    graph: nx.DiGraph[int] = nx.DiGraph()
    for a, b, why in sorted(report.wait_edges):
        if not graph.has_edge(a, b):
            graph.add_edge(a, b, why=why)
    dag = nx.condensation(graph)
    comp_depth: dict[int, int] = {}
    for comp in reversed(list(nx.topological_sort(dag))):  # sinks first
        succ = [comp_depth[c] for c in dag.successors(comp)]
        comp_depth[comp] = 1 + max(succ) if succ else 0
    mapping: dict[int, int] = dag.graph["mapping"]
    by_depth: dict[int, list[int]] = defaultdict(list)
    for rank in sorted(graph.nodes):
        by_depth[comp_depth[mapping[rank]]].append(rank)
    node_of: dict[int, str] = {}
    nodes: list[_Node] = []
    links: list[tuple[str, str, str]] = []
    for r in by_depth.get(0, []):
        node_of[r] = f"r{r}"
        nodes.append(_Node(key=f"r{r}", ranks=(r,), layer=0, is_rank=True))
    for r in by_depth.get(0, []):
        for t in sorted(graph.successors(r)):
            links.append((f"r{r}", f"r{t}", str(graph.edges[r, t]["why"])))
    for depth in sorted(d for d in by_depth if d > 0):
        keyed: dict[frozenset[tuple[str, str]], list[int]] = defaultdict(list)
        for r in by_depth[depth]:
            outs = frozenset(
                (node_of[t], str(graph.edges[r, t]["why"]))
                for t in graph.successors(r)
                if t in node_of  # a target at the same depth (a cycle) is drawn in the box
            )
            keyed[outs].append(r)
        for outs, members in sorted(keyed.items(), key=lambda kv: kv[1][0]):
            key = f"c{members[0]}"
            for r in members:
                node_of[r] = key
            nodes.append(_Node(key=key, ranks=tuple(members), layer=depth, is_rank=False))
            links.extend((key, dst, why) for dst, why in sorted(outs))
    return nodes, links


def render_waitgraph_svg(report: Report) -> str | None:
    """The wait graph as one ``<svg>`` element; None when no rank waits on another."""
    if not report.wait_edges:
        return None
    nodes, links = _nodes(report)
    culprits, suspected = set(report.culprit_ranks), set(report.suspected_ranks)
    by_layer: dict[int, list[_Node]] = defaultdict(list)
    for node in nodes:
        by_layer[min(node.layer, MAX_COLUMNS - 1)].append(node)
    n_cols = max(by_layer) + 1
    whys = sorted({why for _, _, why in links})
    # as wide as the columns, the caption's longest line and the legend (never cut)
    width = max(
        40 + n_cols * COL_PX,
        40 + max(_text_px(line) for line in CAPTION),
        40 + _legend_px(whys),
    )
    top = 8 + len(CAPTION) * CAPTION_LINE_PX  # the nodes start under the caption
    tallest = max(min(len(v), MAX_PER_COLUMN + 1) for v in by_layer.values())
    height = top + tallest * NODE_GAP + 24
    pos: dict[str, tuple[float, float]] = {}
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="waitgraph" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="which ranks wait on which">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'fill="#666"/></marker></defs>',
    ]
    shapes: list[str] = []
    for col, column in sorted(by_layer.items()):
        cx = width - 20 - COL_PX / 2 - col * COL_PX
        shown = column[:MAX_PER_COLUMN]
        for i, node in enumerate(shown):
            cy = top + NODE_GAP / 2 + i * NODE_GAP
            pos[node.key] = (cx, cy)
            shapes.append(_shape(node, cx, cy, culprits, suspected))
        if len(column) > MAX_PER_COLUMN:
            cy = top + NODE_GAP / 2 + MAX_PER_COLUMN * NODE_GAP
            shapes.append(
                f'<text x="{cx:.1f}" y="{cy:.1f}" text-anchor="middle" class="muted">'
                f"+{plural(len(column) - MAX_PER_COLUMN, 'more')}</text>"
            )
    for src, dst, why in links:
        if src in pos and dst in pos:
            out.append(_arrow(pos[src], pos[dst], why, src.startswith("r"), dst.startswith("r")))
    out.extend(shapes)
    out.extend(
        f'<text x="20" y="{16 + i * CAPTION_LINE_PX}" class="muted gcap">{escape(line)}</text>'
        for i, line in enumerate(CAPTION)
    )
    out.append(_legend(whys, height - 8))
    out.append("</svg>")
    return "\n".join(out)


def _shape(node: _Node, cx: float, cy: float, culprits: set[int], suspected: set[int]) -> str:
    if node.is_rank:
        rank = node.ranks[0]
        fill = "#cb181d" if rank in culprits and rank not in suspected else "#fff"
        dash = ' stroke-dasharray="4 3"' if rank in suspected else ""
        colour = "#fff" if fill != "#fff" else "#222"
        role = "suspected (no dump)" if rank in suspected else "culprit" if rank in culprits else ""
        return (
            f'<g><title>rank {rank} {role}</title><circle cx="{cx:.1f}" cy="{cy:.1f}" '
            f'r="{RADIUS}" fill="{fill}" stroke="#cb181d" stroke-width="2"{dash}/>'
            f'<text x="{cx:.1f}" y="{cy + 4:.1f}" text-anchor="middle" class="node" '
            f'fill="{colour}">{rank}</text></g>'
        )
    label = _box_label(node.ranks)
    return (
        f"<g><title>ranks {escape(compact_ranks(node.ranks, max_chars=400))}</title>"
        f'<rect x="{cx - BOX_W / 2:.1f}" y="{cy - BOX_H / 2:.1f}" width="{BOX_W}" '
        f'height="{BOX_H}" rx="6" fill="#fdd96a" stroke="#b8860b"/>'
        f'<text x="{cx:.1f}" y="{cy - 2:.1f}" text-anchor="middle" class="node">'
        f"rank{'s' if len(node.ranks) > 1 else ''} {escape(label)}</text>"
        f'<text x="{cx:.1f}" y="{cy + 12:.1f}" text-anchor="middle" class="muted">'
        f"{plural(len(node.ranks), 'rank')} waiting</text></g>"
    )


EDGE_COLOURS = {
    "never_joined": "#cb181d",
    "blocked_elsewhere": "#888888",
    "p2p_unmatched": "#2171b5",
    "mismatch": "#6a51a3",
    "not_started": "#e6550d",
    "no_dump": "#252525",
}


def _arrow(
    a: tuple[float, float], b: tuple[float, float], why: str, from_rank: bool, to_rank: bool
) -> str:
    (x1, y1), (x2, y2) = a, b
    colour = EDGE_COLOURS.get(why, "#666666")
    if abs(x1 - x2) < 1:  # same column (a cycle): downwards bends right, upwards left
        side = 1 if y2 > y1 else -1
        bend = x1 + side * (RADIUS + 40 + abs(y2 - y1) / 4)
        path = (
            f"M{x1 + side * RADIUS:.1f},{y1:.1f} Q{bend:.1f},{(y1 + y2) / 2:.1f} "
            f"{x2 + side * RADIUS:.1f},{y2:.1f}"
        )
    else:
        start = x1 + (RADIUS if from_rank else BOX_W / 2)
        reach = RADIUS if to_rank else BOX_W / 2
        end = x2 - (reach if x2 > x1 else -reach)
        path = f"M{start:.1f},{y1:.1f} L{end:.1f},{y2:.1f}"
    return (
        f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="1.6" '
        f'marker-end="url(#arrow)"><title>{escape(why.replace("_", " "))}</title></path>'
    )


def _text_px(text: str, size: float = 11.0) -> float:
    """A generous width of ``text`` in the sans-serif font at ``size`` px (0.6 em a
    character: wider than the average of any common sans-serif font)."""
    return 0.6 * size * len(text)


def _legend_px(whys: list[str]) -> float:
    return sum(_LEGEND_STEP + _text_px(why.replace("_", " "), 10) for why in whys)


_LEGEND_STEP = 40.0  # the line before a legend entry's text, and the gap after it


def _legend(whys: list[str], y: float) -> str:
    parts = []
    x = 20.0
    for why in whys:
        colour = EDGE_COLOURS.get(why, "#666666")
        text = why.replace("_", " ")
        parts.append(
            f'<line x1="{x:.1f}" y1="{y - 4:.1f}" x2="{x + 22:.1f}" y2="{y - 4:.1f}" '
            f'stroke="{colour}" stroke-width="2.5"/>'
            f'<text x="{x + 28:.1f}" y="{y:.1f}" class="edge">{escape(text)}</text>'
        )
        x += _LEGEND_STEP + _text_px(text, 10)
    return "".join(parts)


def _box_label(ranks: tuple[int, ...]) -> str:
    text = format_ranks(ranks)
    if len(text) <= 18:
        return text
    return text[:18].rsplit(",", 1)[0] + ",…"
