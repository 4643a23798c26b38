"""How quickly the explorer answers: first frame, head repaint, head toggle.

Run in a fresh process (torch not yet imported), from the repository root:

    python benchmarks/ui_latency.py [--model M] [--device D] [--repeats N] [-o FILE.json]

Measures, in one run, with the real model behind the app (Textual's headless pilot):
- the time to the first frame and the time until the model is ready, from app start;
- repainting another head of a 64-token sentence: the app's handler for a new selection
  (every pane redrawn from memory, the heatmap rendered to lines) plus the lines of the
  heatmap and the grid that the compositor asks for; budget 30 ms;
- switching a head off: from the toggle handler until the new heatmap and effect are
  drawn (the worker's forward pass included), against a bare forward pass with attentions
  over the same 64 tokens; budget 2 forward passes;
- repainting another head of a 128-token sentence (`--long-tokens`), as above, in the
  pane's automatic layout (dense where the map does not fit) and zoomed (`z`); budget 30 ms.
The pilot's own key-press and idle waits (tens of ms of sleeping) are left out: handlers are
called directly, as the key bindings would.
Prints JSON; exit status 0 whatever the numbers (it measures, it does not judge).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

from common import emit, synchronise  # benchmarks/common.py, found beside this script

STARTED = time.perf_counter()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--long-tokens", type=int, default=128)
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()
    result = asyncio.run(measure(args))
    emit(
        result,
        args.output,
        f"ui_latency: first frame {result['first_frame_s']:.2f}s, model ready {result['model_ready_s']:.2f}s; "
        f"repaint {result['repaint_ms']['median']:.1f} ms, {args.long_tokens} tokens {result['repaint_long_ms']['median']:.1f} ms, "
        f"zoomed {result['repaint_long_zoomed_ms']['median']:.1f} ms (budget 30); toggle {result['toggle_ms']['median']:.1f} ms "
        f"= {result['toggle_over_forward']:.2f} forward passes (budget 2)",
    )


async def measure(args) -> dict:
    from rich.console import Console

    from bertscope.ui.app import ExplorerApp
    from bertscope.ui.main_screen import MainScreen
    from bertscope.ui.widgets.attention_view import AttentionView
    from bertscope.ui.widgets.head_grid import HeadGrid
    from tests.helpers.ui import settle  # the tests' wait for the workers and their messages

    marks: dict[str, float] = {}
    repainted = asyncio.Event()

    class TimedScreen(MainScreen):
        def _analysed(self, progress) -> None:
            super()._analysed(progress)  # repaint first, then take the time
            marks["repainted"] = time.perf_counter()
            repainted.set()

    class TimedExplorer(ExplorerApp):
        def get_default_screen(self) -> MainScreen:
            return TimedScreen(id="_default")

        # Textual calls each class's handler in turn, so this adds to ExplorerApp's, not replaces it.
        def on_mount(self) -> None:
            self.call_after_refresh(lambda: marks.setdefault("first_frame", time.perf_counter()))

    def open_backend(report):
        from bertscope.model.session import Session
        from bertscope.session_backend import SessionBackend

        backend = SessionBackend(Session.open(args.model, device=args.device))
        marks["model_ready"] = time.perf_counter()
        return backend

    app = TimedExplorer(open_backend, text="The keys to the cabinet are on the table.", glyphs=False)
    app_started = time.perf_counter()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        main = app.main_screen
        session = app.backend.session
        text = sentence_of(session, args.tokens)
        sentence = app.query_one("#sentence")
        sentence.value = text
        await sentence.action_submit()
        await settle(pilot)
        assert len(main.analysis.current.tokens) == args.tokens

        grid = app.query_one(HeadGrid)
        view = app.query_one(AttentionView)
        grid.focus()
        console = Console(width=view.size.width, color_system="truecolor", file=open("/dev/null", "w"))

        def draw() -> None:
            """What the compositor asks of the two changed panes for one frame."""
            for y in range(view.size.height):
                view.render_line(y)
            console.render_lines(grid.render(), console.options)

        direct = []
        for step in range(args.repeats):
            layer, head = step % session.num_layers, (step * 5) % session.num_heads
            started = time.perf_counter()
            main.on_head_grid_selected(HeadGrid.Selected(layer, head))
            draw()
            direct.append(time.perf_counter() - started)

        toggles = []
        for _ in range(args.repeats):
            layer, head = app.state.layer, app.state.head
            repainted.clear()
            started = time.perf_counter()
            main.on_head_grid_toggled(HeadGrid.Toggled(layer, head))  # one forward pass under the mask
            await repainted.wait()
            draw()
            toggles.append(time.perf_counter() - started)
            assert len(main.analysis.current.mask) == 1
            main.on_head_grid_toggled(HeadGrid.Toggled(layer, head))  # back on: the unmasked result is reused
            await settle(pilot)
            main.on_head_grid_selected(HeadGrid.Selected((layer + 1) % session.num_layers, (head + 7) % session.num_heads))
            await settle(pilot)  # the user looks at the new head before switching it off

        long_text = sentence_of(session, args.long_tokens)
        sentence.value = long_text
        await sentence.action_submit()
        await settle(pilot)
        assert len(main.analysis.current.tokens) == args.long_tokens
        grid.focus()

        def repaint_heads() -> list[float]:
            times = []
            for step in range(args.repeats):
                layer, head = step % session.num_layers, (step * 5 + 1) % session.num_heads
                started = time.perf_counter()
                main.on_head_grid_selected(HeadGrid.Selected(layer, head))
                draw()
                times.append(time.perf_counter() - started)
            return times

        long_direct = repaint_heads()
        long_dense = view.dense_shown
        main.action_zoom()
        await settle(pilot)
        console = Console(width=view.size.width, color_system="truecolor", file=open("/dev/null", "w"))
        long_zoomed = repaint_heads()
        main.action_zoom()
        await settle(pilot)

        forwards = bare_forward_times(session, text, args.repeats)
    to_ms = lambda values: {"median": 1000 * statistics.median(values), "p90": 1000 * quantile(values, 0.9)}  # noqa: E731
    toggle, forward = statistics.median(toggles), statistics.median(forwards)
    return {
        "benchmark": "ui_latency",
        "model": session.info.source,
        "device": session.info.device,
        "tokens": args.tokens,
        "repeats": args.repeats,
        "first_frame_s": marks["first_frame"] - app_started,
        "model_ready_s": marks["model_ready"] - app_started,
        "first_frame_before_model": marks["first_frame"] < marks["model_ready"],
        "process_start_to_app_s": app_started - STARTED,
        "repaint_ms": to_ms(direct),
        "long_tokens": args.long_tokens,
        "repaint_long_ms": to_ms(long_direct),
        "repaint_long_dense": long_dense,
        "repaint_long_zoomed_ms": to_ms(long_zoomed),
        "toggle_ms": to_ms(toggles),
        "bare_forward_with_attentions_ms": to_ms(forwards),
        "toggle_over_forward": toggle / forward,
        "budgets": {"repaint_ms": 30, "toggle_forward_passes": 2},
        "within_budget": max(map(statistics.median, (direct, long_direct, long_zoomed))) * 1000 <= 30 and toggle <= 2 * forward,
    }


def sentence_of(session, tokens: int) -> str:
    """A plain English text whose tokenisation (special tokens included) is exactly `tokens` long."""
    words = "the committee said that the new bridge over the river would open next spring".split()
    text = ""
    for index in range(10 * tokens):
        candidate = (text + " " + words[index % len(words)]).strip()
        if len(session.encode(candidate)) > tokens:
            break
        text = candidate
    while len(session.encode(text)) < tokens:  # the next word took several pieces: top up with a one-piece word
        text += " the"
    if len(session.encode(text)) != tokens:
        raise SystemExit(f"could not build a text of exactly {tokens} tokens")
    return text


def bare_forward_times(session, text: str, repeats: int) -> list[float]:
    """A bare transformers forward with attentions (eager) over the same tokens, same device."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(session.loaded.directory, attn_implementation="eager").to(session.device).eval()
    inputs = {k: v.to(session.device) for k, v in session.loaded.family.inputs(dict(session.tokenizer(text, return_tensors="pt"))).items()}
    times = []
    with torch.inference_mode():
        for step in range(repeats + 3):
            started = time.perf_counter()
            model(**inputs, output_hidden_states=True, output_attentions=True)
            synchronise(session.device)
            if step >= 3:
                times.append(time.perf_counter() - started)
    return times


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/helpers/ui.py
    main()
