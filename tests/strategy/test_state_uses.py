"""The memory model's saved states (taskrt/bufferuses.py `_state_uses`: C maps over the
tasks of launches that keep or take state, keys numbered by first use) equal the model node
by node (bufferkeys.state_key asked of every task: test_sim_classes.reference_liveness), on
the transformer's and Megatron GPT's graphs with their launches' saved bytes redrawn at
random: colors with no entry or 0 bytes (no state), a keeper's and its taker's bytes equal
(one buffer) or not (two), launches without a taker given some, and none at all."""
import random
import warnings

import pytest

from taskrt.taskgraph import TASK

from test_sim_classes import assert_liveness_equals_the_model, graph_of

warnings.simplefilter("ignore")


def redraw_saved_bytes(graph, rng: random.Random) -> int:
    """Give the graph's launches new saved bytes (as above); returns how many tasks keep
    or take some."""
    launches = list({id(n.launch): n.launch for n in graph.nodes if n.kind is TASK}.values())
    drawn = {}
    for launch in launches:
        had = launch.saved_bytes
        if not had and rng.random() < 0.8:
            continue
        mode = rng.choice(["same", "redraw", "none"])
        source = drawn.get(launch.state_from) if launch.state_from else None
        if mode == "same" and source is not None:
            launch.saved_bytes = source             # (the keeper's: one buffer per color)
            continue
        if mode == "none":
            launch.saved_bytes = None if rng.random() < 0.5 else {}
            drawn[launch.name] = launch.saved_bytes
            continue
        saved = {}
        for color in launch.colors:
            r = rng.random()
            if r < 0.2:
                continue                            # no entry: no state
            saved[color] = 0 if r < 0.35 else rng.choice([1, 4096, 3 << 20, 7 << 20])
        launch.saved_bytes = saved
        drawn[launch.name] = saved
    return sum(1 for n in graph.nodes if n.kind is TASK and n.launch.saved_bytes and
               n.launch.saved_bytes.get(n.color, 0))


@pytest.mark.parametrize("name,seed", [("transformer", -1), ("transformer", 3),
                                       ("gpt-t2", -1), ("gpt-t4", -1)])
@pytest.mark.parametrize("draw", range(3))
def test_saved_states_equal_the_model_node_by_node(name, seed, draw):
    graph, _ = graph_of(name, seed)
    rng = random.Random(100 * draw + seed)
    redraw_saved_bytes(graph, rng)
    assert_liveness_equals_the_model(graph, seed)


def test_the_draws_reach_states_and_no_states():
    """The cases above have tasks with state and stateful launches' tasks without."""
    graph, _ = graph_of("transformer", -1)
    kept = redraw_saved_bytes(graph, random.Random(0))
    stateful = sum(1 for n in graph.nodes if n.kind is TASK and n.launch.saved_bytes)
    assert 0 < kept < stateful
