"""RolloutPipeline on its own: the capacity bound, get_batch's limits, weight versions and lag,
and infrastructure failures inside a group.

The environments are real (a controller and a worker of a small in-process task, over loopback
HTTP); the engines are scripted and deterministic: every turn waits at a gate the test opens,
word by word (each group plays its own sample, so a word is a group), and the reply is fixed, so
each check is an exact count, never a timing.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
import torch
from stack_helpers import Stack

from agentrl_envs.task import Task, tool
from agentrl_trainer.pipeline import Group, RolloutPipeline
from agentrl_trainer.rollout import RolloutSettings, TurnSample, turn_seed

pytestmark = pytest.mark.timeout(120)

WORD_RE = re.compile(r"Echo the word '(w\d+)'")
TASK = "recite"
POLL_S = 0.005  # how often a held turn looks at its gate


class Recite(Task):
    """Sample i asks to echo ``w<i>``: echoing it ends the episode with reward 1, any other text
    goes on, and ``crash`` breaks the task (status ``task error``: an infrastructure failure)."""

    name = TASK
    max_turns = 20
    splits = ("dev",)
    concurrency = 256

    @classmethod
    def load_samples(cls, split: str | None = None, data: Any = None) -> list[dict[str, Any]]:
        return [{"word": f"w{i}"} for i in range(64)]

    async def setup(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": f"Echo the word '{self.sample['word']}'."}]

    @tool
    async def echo(self, text: str) -> str:
        """Echo a text back.

        Args:
            text: The text to echo.
        """
        if text == "crash":
            raise RuntimeError("the task broke")
        if text == self.sample["word"]:
            self.finish(1.0)
        return text


class InOrder:
    """A sampler that gives group n sample n (so group n plays word ``w<n>``)."""

    def __init__(self) -> None:
        self.n = 0

    def draw(self) -> tuple[str, int]:
        self.n += 1
        return TASK, self.n - 1


class Script:
    """What the scripted engines share: a gate per word and the replies.

    A turn of word ``w`` waits until ``open(w, n)`` grants it one of ``n`` passes (``math.inf``:
    for good); ``open(w, n, turn=t)`` grants passes to turn ``t`` only, so that a later turn
    cannot take a pass meant for an earlier one that has not looked at its gate yet. Turns before ``wrong_turns`` echo ``nope``; the next one echoes the word, except
    that the first ``crashes[w]`` such turns echo ``crash``.
    """

    def __init__(self, wrong_turns: int = 0) -> None:
        self.wrong_turns = wrong_turns
        self.crashes: Counter[str] = Counter()
        self.fail_on: set[str] = set()  # words whose turns make the engine itself raise
        self._passes: Counter[str] = Counter()
        self._turn_passes: Counter[tuple[str, int]] = Counter()
        self._waiting: Counter[str] = Counter()
        self.seen: list[tuple[str, int]] = []  # (word, turn) of every turn that reached an engine
        self._lock = threading.Lock()

    def open(self, word: str, passes: float = math.inf, turn: int | None = None) -> None:
        with self._lock:
            if turn is None:
                self._passes[word] += passes  # type: ignore[assignment]
            else:
                self._turn_passes[(word, turn)] += passes  # type: ignore[assignment]

    def waiting(self, word: str | None = None) -> int:
        with self._lock:
            return sum(self._waiting.values()) if word is None else self._waiting[word]

    def words(self) -> set[str]:
        with self._lock:
            return {w for w, _ in self.seen}

    def reached(self, word: str, turn: int) -> int:
        """How many turns ``turn`` of word ``word`` reached an engine (passed its gate or not)."""
        with self._lock:
            return self.seen.count((word, turn))

    async def wait_gate(self, word: str, turn: int) -> None:
        with self._lock:
            self.seen.append((word, turn))
            self._waiting[word] += 1
        while True:
            with self._lock:
                for passes, key in ((self._turn_passes, (word, turn)), (self._passes, word)):
                    if passes[key] > 0:  # type: ignore[index]
                        passes[key] -= 1  # type: ignore[index]
                        self._waiting[word] -= 1
                        return
            await asyncio.sleep(POLL_S)

    def reply(self, word: str, turn: int) -> str:
        if word in self.fail_on:
            raise RuntimeError(f"engine failure on {word}")
        if turn < self.wrong_turns:
            return "nope"
        with self._lock:
            if self.crashes[word] > 0:
                self.crashes[word] -= 1
                return "crash"
        return word


class ScriptedEngine:
    """A PipelineEngine without a model: waits at the script's gate, then answers with one echo
    call; ``version`` is the step of the last weights loaded (``loads`` lists them)."""

    def __init__(self, script: Script, tokenizer: Any, stop_id: int) -> None:
        self.script = script
        self.tokenizer = tokenizer
        self.stop_id = stop_id
        self.version = 0
        self.busy_seconds = 0.0
        self.loads: list[tuple[int, Mapping[str, torch.Tensor]]] = []

    async def generate(
        self, prompt_ids: list[int], max_tokens: int, temperature: float, top_p: float, tools: Any = None, seed: Any = None
    ) -> TurnSample:
        prompt = self.tokenizer.decode(prompt_ids)
        match = WORD_RE.search(prompt)
        assert match is not None, prompt
        word = match.group(1)
        turn = prompt.count("<|im_start|>assistant") - 1  # the prompt ends with the opened turn
        await self.script.wait_gate(word, turn)
        text = self.script.reply(word, turn)
        call = "<tool_call>\n" + json.dumps({"name": "echo", "arguments": {"text": text}}) + "\n</tool_call>"
        ids = list(self.tokenizer(call, add_special_tokens=False)["input_ids"]) + [self.stop_id]
        return TurnSample(ids, [-0.5] * len(ids), self.version)

    def load_weights(self, named: Mapping[str, torch.Tensor], version: int) -> None:
        self.loads.append((version, named))
        self.version = version

    def close(self) -> None:
        pass


# ------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    from agentrl_envs.chat.loading import model_directory

    return AutoTokenizer.from_pretrained(str(model_directory()), local_files_only=True)


@pytest.fixture(scope="module")
def controller_url() -> Iterator[str]:
    stack = Stack()
    stack.add_worker(Recite)
    yield stack.url
    stack.close()


@pytest.fixture
def make_pipeline(controller_url: str, tokenizer: Any) -> Iterator[Callable[..., tuple[RolloutPipeline, Script]]]:
    started: list[RolloutPipeline] = []
    scripts: list[Script] = []

    def make(
        *,
        num_engines: int = 1,
        wrong_turns: int = 0,
        infra_retries: int = 0,
        **kwargs: Any,
    ) -> tuple[RolloutPipeline, Script]:
        script = Script(wrong_turns)
        stop_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
        engines = [ScriptedEngine(script, tokenizer, stop_id) for _ in range(num_engines)]
        settings = RolloutSettings(max_tokens=64, max_turns=10, infra_retries=infra_retries)
        kwargs.setdefault("group_size", 2)
        pipeline = RolloutPipeline(controller_url, engines, tokenizer, [stop_id], InOrder(), settings, **kwargs)  # type: ignore[arg-type]
        started.append(pipeline.start())
        scripts.append(script)
        return pipeline, script

    yield make
    for script in scripts:  # let held turns finish so stop() cancels nothing mid-call it need not
        for i in range(64):
            script.open(f"w{i}")
    for p in started:
        p.stop()


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.01)


def settle() -> None:
    """Give the pipeline's producer (it looks every 5-20 ms) many chances to start what it may."""
    time.sleep(0.2)


def group_ids(groups: list[Group]) -> list[int]:
    return [g.group_id for g in groups]


def turn_versions(group: Group) -> list[list[int]]:
    """Per episode (by episode id), the weights version each of its turns was sampled with."""
    episodes = sorted(group.episodes, key=lambda e: e.spec.episode_id)
    return [[t.version for t in e.trajectory.turns] for e in episodes if e.trajectory]


def staleness(groups: list[Group], step: int) -> list[int]:
    """Per turn, optimizer steps between its weights and those trained at ``step``, as
    AgentRLTrainer logs it (rollout/staleness_*): the trained weights are step - 1's."""
    return sorted(step - 1 - t.version for g in groups for e in g.episodes if e.trajectory for t in e.trajectory.turns)


# ------------------------------------------------------------------------------ capacity bound


def test_queued_plus_in_flight_groups_never_exceed_capacity(make_pipeline) -> None:
    pipeline, script = make_pipeline(capacity_groups=3, group_size=2)
    wait_for(lambda: script.waiting() == 6, "3 groups x 2 episodes wait at their first turn")
    settle()
    assert script.words() == {"w0", "w1", "w2"} and script.waiting() == 6  # no 4th group

    script.open("w0")
    wait_for(lambda: pipeline.queued == 1, "group 0 is queued")
    settle()
    assert script.words() == {"w0", "w1", "w2"}  # 1 queued + 2 in flight = capacity: nothing new

    (g0,) = pipeline.get_batch(1)
    assert g0.group_id == 0 and g0.task == TASK and g0.index == 0 and g0.dropped == 0
    assert [(e.completed, e.reward, e.turns) for e in g0.episodes] == [(True, 1.0, 1)] * 2
    wait_for(lambda: script.waiting("w3") == 2, "taking a group makes room for one more")
    settle()
    assert script.words() == {"w0", "w1", "w2", "w3"}

    for w in ("w1", "w2", "w3"):
        script.open(w)
    wait_for(lambda: pipeline.queued == 3, "the queue fills to capacity")
    settle()
    assert pipeline.queued == 3 and script.words() == {"w0", "w1", "w2", "w3"}  # a full queue: nothing runs
    assert sorted(group_ids(pipeline.get_batch(1))) == [1, 2, 3]  # a step drains the queue
    wait_for(lambda: all(script.waiting(f"w{i}") == 2 for i in (4, 5, 6)), "three groups taken, three started")
    settle()
    assert script.words() == {f"w{i}" for i in range(7)}


def test_max_concurrent_groups_bounds_the_groups_in_flight(make_pipeline) -> None:
    pipeline, script = make_pipeline(capacity_groups=4, max_concurrent_groups=2)
    wait_for(lambda: script.waiting() == 4, "2 groups wait at their first turn")
    settle()
    assert script.words() == {"w0", "w1"}
    script.open("w0")
    wait_for(lambda: pipeline.queued == 1 and script.waiting("w2") == 2, "group 0 queued, group 2 in flight")
    settle()
    assert script.words() == {"w0", "w1", "w2"}  # 1 queued + 2 in flight: under capacity, at the concurrency cap


# -------------------------------------------------------------------------------- get_batch


def test_get_batch_waits_for_min_groups_and_takes_every_complete_group(make_pipeline) -> None:
    pipeline, script = make_pipeline(capacity_groups=4)
    wait_for(lambda: script.waiting() == 8, "4 groups in flight")
    with pytest.raises(TimeoutError, match=r"^0 of 1 groups ready after 0.2 s$"):
        pipeline.get_batch(1, timeout=0.2)
    script.open("w0")
    wait_for(lambda: pipeline.queued == 1, "group 0 queued")
    script.open("w1")
    wait_for(lambda: pipeline.queued == 2, "group 1 queued")
    with pytest.raises(TimeoutError, match=r"^2 of 3 groups ready after 0.2 s$"):
        pipeline.get_batch(3, timeout=0.2)
    assert pipeline.queued == 2  # a call that timed out took nothing
    assert group_ids(pipeline.get_batch(1)) == [0, 1]  # every complete group, in the order they completed
    assert pipeline.queued == 0

    result: dict[str, list[Group]] = {}
    waiter = threading.Thread(target=lambda: result.update(batch=pipeline.get_batch(2, timeout=60)), daemon=True)
    waiter.start()
    script.open("w2")
    wait_for(lambda: pipeline.queued == 1, "group 2 queued")
    settle()
    assert waiter.is_alive() and pipeline.queued == 1  # one group is not min_groups
    script.open("w3")
    waiter.join(60)
    assert sorted(group_ids(result["batch"])) == [2, 3]


def test_no_complete_group_stays_queued_after_a_step(make_pipeline) -> None:
    """Every step drains the queue: whatever completed before it, it trains on, however many (up
    to the capacity, which the queue never exceeds)."""
    pipeline, script = make_pipeline(capacity_groups=4)
    for step, words in enumerate((["w0"], ["w1", "w2", "w3"], ["w4", "w5", "w6", "w7"])):
        wait_for(lambda: script.waiting() == 8, "4 groups in flight")
        for w in words:
            script.open(w)
        n = len(words)
        wait_for(lambda n=n: pipeline.queued == n, f"{n} groups queued")
        batch = pipeline.get_batch(1)
        assert sorted(g.group_id for g in batch) == sorted(int(w[1:]) for w in words), step
        assert pipeline.queued == 0


@pytest.mark.parametrize(("min_groups", "match"), [(0, "min_groups"), (5, "capacity")])
def test_get_batch_refuses_limits_it_could_never_meet(make_pipeline, min_groups: int, match: str) -> None:
    pipeline, _ = make_pipeline(capacity_groups=4)
    with pytest.raises(ValueError, match=match):
        pipeline.get_batch(min_groups)


def test_the_wrong_call_for_the_mode_and_a_stopped_pipeline_raise(make_pipeline) -> None:
    async_pipeline, _ = make_pipeline()
    sync_pipeline, _ = make_pipeline(mode="sync")
    with pytest.raises(RuntimeError, match="collect is for sync mode"):
        async_pipeline.collect(1)
    with pytest.raises(RuntimeError, match="get_batch is for async mode"):
        sync_pipeline.get_batch(1)
    async_pipeline.stop()
    with pytest.raises(RuntimeError, match="stopped"):
        async_pipeline.get_batch(1, timeout=5)


def test_an_engine_failure_fails_get_batch(make_pipeline) -> None:
    pipeline, script = make_pipeline(capacity_groups=1)
    script.fail_on.add("w0")
    script.open("w0")
    with pytest.raises(RuntimeError, match="the rollout pipeline failed") as failed:
        pipeline.get_batch(1, timeout=30)
    assert str(failed.value.__cause__) == "engine failure on w0"


def test_sync_collect_plays_exactly_the_groups_asked_and_nothing_between(make_pipeline) -> None:
    pipeline, script = make_pipeline(mode="sync", group_size=3)
    for i in range(4):
        script.open(f"w{i}")
    groups = pipeline.collect(2)
    assert sorted(group_ids(groups)) == [0, 1] and [len(g.episodes) for g in groups] == [3, 3]
    settle()
    assert script.words() == {"w0", "w1"} and pipeline.queued == 0  # engines idle between steps
    assert sorted(group_ids(pipeline.collect(1))) == [2]
    assert pipeline.stats()["episodes"] == 9.0


# ------------------------------------------------------------------------- versions and lag


@pytest.mark.parametrize(
    ("lagging_prob", "engine", "first", "second", "stale_at_2", "stale_at_3"),
    [
        # every turn on the current engine: it takes every step's weights
        (0.0, 0, [[0, 1], [0, 1]], [[1, 2], [1, 2]], [0, 0, 1, 1], [0, 0, 1, 1]),
        # every turn on the lagging engine: it skips step 1 and takes step 2 (lag_steps 2)
        (1.0, 1, [[0, 0], [0, 0]], [[0, 2], [0, 2]], [1, 1, 1, 1], [0, 0, 2, 2]),
    ],
)
def test_turns_carry_the_version_of_the_engine_that_sampled_them(
    make_pipeline,
    lagging_prob: float,
    engine: int,
    first: list[list[int]],
    second: list[list[int]],
    stale_at_2: list[int],
    stale_at_3: list[int],
) -> None:
    """Two engines, the second lagging (lag_steps 2); one group at a time, two turns per episode.
    Each group's first turns are sampled before a publish and its second turns after it."""
    pipeline, script = make_pipeline(
        num_engines=2, lagging_fraction=0.5, lag_steps=2, lagging_prob=lagging_prob, capacity_groups=1, wrong_turns=1
    )
    current, lagging = pipeline.engines
    weights = {"layer.weight": torch.ones(2)}
    assert pipeline.current == [0] and pipeline.lagging == [1]
    assert pipeline.publish(0, weights, every_engine=True) == [0, 1]  # the start of training

    def play_across_publish(word: str, step: int) -> list[int]:
        # both first turns, by turn: a word-wide pass could go to an episode's second turn when
        # it reaches its gate before its sibling's first turn has looked again (CI saw it hang)
        script.open(word, 2, turn=0)
        wait_for(lambda: script.reached(word, 1) == 2 and script.waiting(word) == 2, f"{word}'s second turns wait")
        due = pipeline.publish(step, weights)
        script.open(word)
        return due

    assert play_across_publish("w0", 1) == [0]  # the lagging engine skips step 1
    (g0,) = pipeline.get_batch(1, timeout=30)  # taken by step 2
    assert turn_versions(g0) == first and staleness([g0], step=2) == stale_at_2

    wait_for(lambda: script.waiting("w1") == 2, "group 1 starts once group 0 is taken (capacity 1)")
    assert play_across_publish("w1", 2) == [0, 1]  # every lag_steps steps the lagging engine catches up
    (g1,) = pipeline.get_batch(1, timeout=30)  # taken by step 3
    assert turn_versions(g1) == second and staleness([g1], step=3) == stale_at_3

    turns = [t for g in (g0, g1) for e in g.episodes if e.trajectory for t in e.trajectory.turns]
    assert {(t.engine, t.lagging) for t in turns} == {(engine, engine == 1)}
    assert [v for v, _ in current.loads] == [0, 1, 2] and [v for v, _ in lagging.loads] == [0, 2]
    assert all(named is weights for _, named in current.loads + lagging.loads)


def test_mixed_engines_label_each_turn_with_its_own_engine_version(make_pipeline) -> None:
    """lagging_prob 0.5: one trajectory mixes the two policies, each turn labelled with the
    version of the engine that sampled it; which turns lag follows from the seed, episode and turn
    alone (turn_seed), whatever the order in which concurrent episodes reach their turns."""
    pipeline, script = make_pipeline(
        num_engines=2, lagging_fraction=0.5, lag_steps=4, lagging_prob=0.5, capacity_groups=1, wrong_turns=1, group_size=4
    )
    weights = {"layer.weight": torch.ones(2)}
    pipeline.publish(0, weights, every_engine=True)
    wait_for(lambda: script.waiting("w0") == 4, "every first turn has its engine")
    script.open("w0", 4, turn=0)
    wait_for(lambda: script.reached("w0", 1) == 4 and script.waiting("w0") == 4, "w0's second turns wait")
    assert pipeline.publish(1, weights) == [0]
    script.open("w0")
    (g0,) = pipeline.get_batch(1, timeout=30)

    def lags(episode: int, turn: int) -> bool:  # the pipeline's draw for this turn (seed 0)
        return random.Random(turn_seed(0, episode, turn, purpose="engine")).random() < 0.5

    expected = {0: [], 1: []}  # turn -> (engine, version) per episode
    for e in g0.episodes:
        assert e.trajectory is not None
        for i, t in enumerate(e.trajectory.turns):
            assert t.lagging == (t.engine == 1) == lags(e.spec.episode_id, i)
            # after step 1 only the current engine has its weights
            expected[i].append((1, 0) if lags(e.spec.episode_id, i) else (0, i))
            assert (t.engine, t.version) == expected[i][-1]
    # seed 0 mixes them: episodes 1 and 3 lag at turn 0
    assert {t.engine for e in g0.episodes for t in e.trajectory.turns} == {0, 1}
    assert staleness([g0], step=2) == sorted(1 - v for vs in expected.values() for _, v in vs)


# ------------------------------------------------------------------ infrastructure failures


def test_an_episode_lost_mid_group_is_dropped_and_the_group_still_forms(make_pipeline) -> None:
    pipeline, script = make_pipeline(mode="sync", group_size=3, wrong_turns=1, infra_retries=0)
    script.crashes["w0"] = 1  # one episode's second turn breaks the task: status "task error"
    script.open("w0")
    (g,) = pipeline.collect(1)
    assert g.group_id == 0 and g.dropped == 1 and len(g.episodes) == 2
    assert [(e.completed, e.reward, e.turns, e.attempts) for e in g.episodes] == [(True, 1.0, 2, 1)] * 2
    stats = pipeline.stats()
    assert (stats["episodes"], stats["infra_failures"], stats["groups_discarded"]) == (3.0, 1.0, 0.0)


def test_an_episode_lost_mid_group_is_replayed_while_retries_are_left(make_pipeline) -> None:
    pipeline, script = make_pipeline(mode="sync", group_size=3, wrong_turns=1, infra_retries=1)
    script.crashes["w0"] = 1
    script.open("w0")
    (g,) = pipeline.collect(1)
    assert g.dropped == 0 and sorted(e.attempts for e in g.episodes) == [1, 1, 2]
    assert all(e.completed and e.reward == 1.0 and e.turns == 2 for e in g.episodes)  # the replay starts afresh
    assert script.reached("w0", 0) == 4  # three first plays and one replay
    assert pipeline.stats()["infra_failures"] == 1.0


def test_a_group_left_with_one_valid_episode_is_discarded(make_pipeline) -> None:
    pipeline, script = make_pipeline(mode="sync", group_size=3, wrong_turns=1)
    script.crashes["w0"] = 2
    script.open("w0")
    script.open("w1")
    assert pipeline.collect(1) == []
    stats = pipeline.stats()
    assert (stats["episodes"], stats["infra_failures"], stats["groups_discarded"]) == (3.0, 2.0, 1.0)
    (g,) = pipeline.collect(1)  # the next group plays as usual
    assert g.group_id == 1 and len(g.episodes) == 3 and g.dropped == 0


def test_async_group_forms_only_once_its_last_episode_is_in(make_pipeline) -> None:
    pipeline, script = make_pipeline(group_size=3, wrong_turns=1, capacity_groups=1)
    script.crashes["w0"] = 1
    script.open("w0", 3, turn=0)  # three first turns
    script.open("w0", 1, turn=1)  # and one second turn, which breaks the task
    wait_for(lambda: script.reached("w0", 1) == 3 and script.waiting("w0") == 2, "two episodes wait at their second turn")
    settle()
    assert pipeline.queued == 0  # the lost episode alone releases nothing
    script.open("w0")
    (g,) = pipeline.get_batch(1, timeout=30)
    assert g.dropped == 1 and len(g.episodes) == 2 and all(e.completed for e in g.episodes)


def test_async_discarded_group_frees_its_capacity(make_pipeline) -> None:
    pipeline, script = make_pipeline(group_size=2, wrong_turns=1, capacity_groups=1)
    script.crashes["w0"] = 2
    script.open("w0")
    wait_for(lambda: script.waiting("w1") == 2, "group 1 starts once group 0 is discarded")
    assert pipeline.queued == 0 and pipeline.buffer.discarded == 1
    assert pipeline.stats()["infra_failures"] == 2.0


# ------------------------------------------------------------------------------ staleness bound


def test_a_simulated_async_run_stays_within_the_staleness_bound(controller_url: str, tokenizer: Any) -> None:
    """docs/trainer.md, "Staleness": with min_groups == capacity each step takes every group there
    is, so a turn of a current engine is at most 1 step old and one of a lagging engine at most
    lag_steps. Simulated engines (long-tailed latency) play multi-turn episodes of varied length
    while the "trainer" publishes after every step; every turn of every batch is checked."""
    from agentrl_trainer.engines import SimulatedEngine

    def respond(prompt: str) -> str:
        word = WORD_RE.search(prompt).group(1)  # type: ignore[union-attr]
        turns = prompt.count("<|im_start|>assistant")  # this one included
        text = word if turns > int(word[1:]) % 4 else "nope"  # 1 to 4 turns, by sample
        return "<tool_call>\n" + json.dumps({"name": "echo", "arguments": {"text": text}}) + "\n</tool_call>"

    lag_steps, capacity, steps = 2, 3, 10
    engines = [SimulatedEngine(tokenizer, respond, median_s=0.01, sigma=1.5, seed=i) for i in range(2)]
    stop_id = engines[0].stop_token_id
    settings = RolloutSettings(max_tokens=64, max_turns=10, seed=0)
    pipeline = RolloutPipeline(
        controller_url, engines, tokenizer, [stop_id], InOrder(), settings, group_size=2,
        capacity_groups=capacity, lagging_fraction=0.5, lag_steps=lag_steps, lagging_prob=0.5, seed=0,
    )  # fmt: skip
    train = random.Random(1)
    seen: dict[bool, list[int]] = {True: [], False: []}  # lagging turn? -> staleness of each
    with pipeline:
        pipeline.publish(0, {}, every_engine=True)
        for step in range(1, steps + 1):
            batch = pipeline.get_batch(capacity, timeout=60)
            assert len(batch) == capacity
            for g in batch:
                for e in g.episodes:
                    assert e.trajectory is not None
                    for t in e.trajectory.turns:
                        seen[t.lagging].append(step - 1 - t.version)
            time.sleep(train.uniform(0.0, 0.05))  # the optimizer step
            pipeline.publish(step, {})
    assert max(seen[False]) <= 1 and max(seen[True]) <= lag_steps, seen
    assert min(seen[False] + seen[True]) >= 0
    # the run exercised the bound: turns one step old (sampled while the step trained) and lagging ones older
    assert 1 in seen[False] and max(seen[True]) == lag_steps
