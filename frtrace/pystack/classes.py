"""Group ranks by their main thread's Python stack, as STAT does for MPI.

Ranks whose stacks are identical (every frame's function, file and line; or, coarsened,
function and file) form one class; a few classes cover thousands of ranks, and the small
ones (outliers) are usually where to look. The classes also merge into a prefix tree
(common outer frames shared), for the JSON output.

Frames are compared in a form every sample format agrees on: the last part of the function
name (``Event.wait`` and faulthandler's ``wait`` match), the package part of a library path,
the base name of the user's files; native frames (``py-spy --native``) are left out unless
asked for (their addresses differ from rank to rank).

    4,096 ranks, 2 stack classes (main thread; frames compared by function, file and line)
      4,095 ranks (0-3,5-4095): all_reduce <- train_step (train.py:120)
      rank 4: load_batch (data.py:88)  [outlier]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from frtrace.base.ranges import format_ranks
from frtrace.pystack.model import Frame, ProcessStacks, ThreadStack
from frtrace.pystack.where import frame_label, is_library_frame, pick_thread, short_filename

__all__ = [
    "PrefixNode",
    "StackClass",
    "StackClasses",
    "classes_to_dict",
    "format_ranks",
    "group_stacks",
    "render_classes",
    "tree_to_dict",
]

FrameKey = tuple[str, str, int | None]
RankFormatter = Callable[[Iterable[int]], str]


@dataclass(frozen=True, slots=True, kw_only=True)
class StackClass:
    """Ranks with one stack. ``frames``: a representative rank's, innermost first."""

    ranks: tuple[int, ...]
    frames: tuple[Frame, ...]
    user_frame: Frame | None
    description: str  # "all_reduce <- train_step (train.py:120)"
    outlier: bool

    @property
    def count(self) -> int:
        return len(self.ranks)


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefixNode:
    """A run of frames shared by ``ranks`` (outermost first); ``ends`` stop here."""

    frames: tuple[Frame, ...]
    ranks: tuple[int, ...]
    ends: tuple[int, ...]
    children: tuple[PrefixNode, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class StackClasses:
    total: int  # ranks given
    coarse: bool
    classes: tuple[StackClass, ...]  # largest first, then by lowest rank
    no_stack: tuple[int, ...]  # ranks whose sample has no Python frame to compare
    tree: PrefixNode  # the root: no frames, every rank with a stack


# --- grouping ----------------------------------------------------------------------------


def _frames_of(
    item: ProcessStacks | ThreadStack | Sequence[Frame],
) -> tuple[Frame, ...]:
    if isinstance(item, ProcessStacks):
        thread = pick_thread(item)[0]
        return () if thread is None else thread.frames
    if isinstance(item, ThreadStack):
        return item.frames
    return tuple(item)


def group_stacks(
    stacks: Mapping[int, ProcessStacks | ThreadStack | Sequence[Frame]],
    *,
    coarse: bool = False,
    outlier_fraction: float = 0.05,
    include_native: bool = False,
    extra_library: Iterable[str] = (),
) -> StackClasses:
    """Equivalence classes of ranks by stack (rank -> a process's sample, a thread, or its
    frames innermost first). A process is read on its main thread (or the thread
    :func:`~frtrace.pystack.where.pick_thread` chooses). ``coarse``: compare function and
    file, not the line. A class is an outlier when it is smaller than the largest and holds
    at most ``outlier_fraction`` of the ranks (at least 1 rank)."""
    extra = tuple(extra_library)
    keys = _KeyCache(coarse)
    groups: dict[tuple[FrameKey, ...], list[int]] = {}
    sample: dict[tuple[FrameKey, ...], tuple[Frame, ...]] = {}
    no_stack: list[int] = []
    for rank in sorted(stacks):
        frames = _frames_of(stacks[rank])
        if any(f.native for f in frames):
            frames = tuple(
                f for f in frames if not f.native or (include_native and f.function[:2] != "0x")
            )
        if not frames:
            no_stack.append(rank)
            continue
        key = tuple(map(keys.__getitem__, [(f.function, f.filename, f.line) for f in frames]))
        members = groups.get(key)
        if members is None:
            groups[key] = [rank]
            sample[key] = _without_lines(frames) if coarse else frames
        else:
            members.append(rank)
    with_stack = sum(len(v) for v in groups.values())
    largest = max((len(v) for v in groups.values()), default=0)
    small = max(1, int(with_stack * outlier_fraction))
    order = sorted(groups, key=lambda k: (-len(groups[k]), groups[k][0]))
    descriptions = _describe(order, sample, extra)
    classes = tuple(
        StackClass(
            ranks=tuple(groups[k]),
            frames=sample[k],
            user_frame=_user_frame(sample[k], extra),
            description=descriptions[i],
            outlier=len(groups[k]) < largest and len(groups[k]) <= small,
        )
        for i, k in enumerate(order)
    )
    return StackClasses(
        total=len(stacks),
        coarse=coarse,
        classes=classes,
        no_stack=tuple(no_stack),
        tree=_tree([(k[::-1], sample[k][::-1], groups[k]) for k in order]),
    )


def _without_lines(frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
    """Coarse classes hold ranks at different lines: show none."""
    return tuple(replace(f, line=None) for f in frames)


class _KeyCache(dict[tuple[str, str, int | None], FrameKey]):
    """(function, filename, line) as the sample wrote it -> the form every format agrees on."""

    def __init__(self, coarse: bool) -> None:
        super().__init__()
        self.coarse = coarse

    def __missing__(self, raw: tuple[str, str, int | None]) -> FrameKey:
        function, filename, line = raw
        key = (function.rsplit(".", 1)[-1], short_filename(filename), None if self.coarse else line)
        self[raw] = key
        return key


def _user_frame(frames: tuple[Frame, ...], extra: tuple[str, ...]) -> Frame | None:
    return next((f for f in frames if not is_library_frame(f, extra)), None)


def _describe(
    order: list[tuple[FrameKey, ...]],
    sample: dict[tuple[FrameKey, ...], tuple[Frame, ...]],
    extra: tuple[str, ...],
) -> list[str]:
    """``all_reduce <- train_step (train.py:120)``: the innermost call and the user's frame;
    classes that would read the same get the outer frame where they part (``via ...``)."""
    texts: list[str] = []
    for key in order:
        frames = sample[key]
        user = _user_frame(frames, extra)
        if user is None:
            texts.append(f"{frame_label(frames[0])} (no user frame)")
        elif user is frames[0]:
            texts.append(frame_label(user))
        else:
            texts.append(f"{frames[0].function} <- {frame_label(user)}")
    seen: dict[str, list[int]] = {}
    for i, t in enumerate(texts):
        seen.setdefault(t, []).append(i)
    for idxs in seen.values():
        if len(idxs) < 2:
            continue
        for i in idxs:
            mine = order[i][::-1]  # outermost first
            for pos, k in enumerate(mine):
                if any(pos >= len(order[j]) or order[j][::-1][pos] != k for j in idxs if j != i):
                    texts[i] += f" via {frame_label(sample[order[i]][::-1][pos])}"
                    break
    return texts


class _Node:
    __slots__ = ("children", "ends", "frame")

    def __init__(self, frame: Frame | None) -> None:
        self.frame = frame
        self.ends: list[int] = []
        self.children: dict[FrameKey, _Node] = {}


def _tree(paths: list[tuple[tuple[FrameKey, ...], tuple[Frame, ...], list[int]]]) -> PrefixNode:
    root = _Node(None)
    for keys, frames, ranks in paths:
        node = root
        for k, f in zip(keys, frames, strict=True):
            child = node.children.get(k)
            if child is None:
                child = node.children[k] = _Node(f)
            node = child
        node.ends.extend(ranks)
    return _freeze(root)


def _freeze(root: _Node) -> PrefixNode:
    """Merge single-child runs and build the immutable tree, without recursion (a stack
    can be thousands of frames deep)."""

    def run(start: _Node) -> tuple[list[Frame], _Node]:
        frames = [] if start.frame is None else [start.frame]
        node = start
        while len(node.children) == 1 and not node.ends and node.frame is not None:
            node = next(iter(node.children.values()))
            assert node.frame is not None
            frames.append(node.frame)
        return frames, node

    # post-order over runs: (start node, its run's frames, its last node, built children)
    done: dict[int, PrefixNode] = {}
    todo: list[tuple[_Node, bool]] = [(root, False)]
    while todo:
        start, expanded = todo.pop()
        frames, last = run(start)
        if not expanded:
            todo.append((start, True))
            todo.extend((k, False) for k in last.children.values())
            continue
        kids = sorted(
            (done.pop(id(k)) for k in last.children.values()),
            key=lambda n: (-len(n.ranks), n.ranks[0]),
        )
        ends = sorted(last.ends)
        ranks = sorted([*ends, *(r for k in kids for r in k.ranks)])
        done[id(start)] = PrefixNode(
            frames=tuple(frames), ranks=tuple(ranks), ends=tuple(ends), children=tuple(kids)
        )
    return done[id(root)]


# --- output ------------------------------------------------------------------------------


def _short_ranges(ranks: Sequence[int], fmt: RankFormatter, limit: int) -> str:
    text = fmt(ranks)
    if len(text) <= limit:
        return text
    cut = text.rfind(",", 0, limit)
    return (text[:cut] if cut > 0 else text[:limit]) + ",…"


def _class_line(ranks: Sequence[int], text: str, fmt: RankFormatter, limit: int) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}: {text}"
    return f"{len(ranks):,} ranks ({_short_ranges(ranks, fmt, limit)}): {text}"


def render_classes(
    result: StackClasses,
    *,
    max_lines: int = 8,
    format_ranks: RankFormatter = format_ranks,
    ranks_width: int = 40,
) -> str:
    """A few lines however many ranks: a header, the largest classes (outliers marked),
    then one line for the rest and one for ranks with no stack."""
    basis = "function and file" if result.coarse else "function, file and line"
    n = len(result.classes)
    lines = [
        f"{result.total:,} ranks, {n:,} stack class{'es' if n != 1 else ''} "
        f"(main thread; frames compared by {basis})"
    ]
    shown = result.classes[:max_lines]
    for c in shown:
        mark = "  [outlier]" if c.outlier else ""
        lines.append("  " + _class_line(c.ranks, c.description, format_ranks, ranks_width) + mark)
    rest = result.classes[max_lines:]
    if rest:
        ranks = sorted(r for c in rest for r in c.ranks)
        lines.append(
            f"  … {len(rest):,} more classes of at most {rest[0].count:,} ranks each: "
            f"{len(ranks):,} ranks ({_short_ranges(ranks, format_ranks, ranks_width)})"
        )
    if result.no_stack:
        lines.append(
            "  " + _class_line(result.no_stack, "no Python frame", format_ranks, ranks_width)
        )
    return "\n".join(lines)


def _frame_dict(f: Frame) -> dict[str, Any]:
    return {"function": f.function, "filename": short_filename(f.filename), "line": f.line}


def classes_to_dict(
    result: StackClasses, *, format_ranks: RankFormatter = format_ranks
) -> dict[str, Any]:
    """Everything, JSON-able: the classes (frames innermost first) and the prefix tree
    (frames outermost first). Rank sets are range strings (``"0-3,5"``) with a count."""

    def node_dict(node: PrefixNode) -> dict[str, Any]:
        return {
            "frames": [_frame_dict(f) for f in node.frames],
            "count": len(node.ranks),
            "ranks": format_ranks(node.ranks),
            "ends": format_ranks(node.ends) if node.ends else None,
            "children": [],
        }

    tree = tree_to_dict(result.tree, node_dict)
    return {
        "format": "frtrace-stack-classes",
        "version": 1,
        "total": result.total,
        "coarse": result.coarse,
        "classes": [
            {
                "count": c.count,
                "ranks": format_ranks(c.ranks),
                "outlier": c.outlier,
                "description": c.description,
                "user_frame": None if c.user_frame is None else _frame_dict(c.user_frame),
                "frames": [_frame_dict(f) for f in c.frames],
            }
            for c in result.classes
        ],
        "no_stack": format_ranks(result.no_stack) if result.no_stack else None,
        "tree": tree,
    }


def tree_to_dict(root: PrefixNode, node: Callable[[PrefixNode], dict[str, Any]]) -> dict[str, Any]:
    """The prefix tree as nested dicts: ``node`` gives each node's own fields, including an
    empty ``children`` list that this fills. No recursion: a deep tree must not hit the
    recursion limit."""
    tree = node(root)
    todo = [(root, tree)]
    while todo:
        current, out = todo.pop()
        for child in current.children:
            d = node(child)
            out["children"].append(d)
            todo.append((child, d))
    return tree
