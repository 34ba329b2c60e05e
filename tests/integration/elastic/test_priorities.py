"""Priority classes on a full fake GPU cluster: a high-class model is placed by draining a
low-class replica, whose streamed answers in flight all complete; a model changed on a node
with no room for old and new side by side is replaced in place, saying so. Through a real
gatewayd and agent on a one-card fake inventory, sim engines as real processes, the openai
SDK as client."""

from __future__ import annotations

import asyncio

import openai

from proto.llmgw.v1 import GpuNeed, ModelProfile, ModelSpec
from tests.cluster_fixture import running_cluster, wait_for

GIB = 2**30
PROJECT = "Acme/ml/classes"
# A stream of about three seconds: still going when the high model arrives.
SLOW = ["--ttft-ms", "20", "--itl-ms", "50", "--tokens", "60"]


def _spec(name: str, klass: str, args=()) -> ModelSpec:
    return ModelSpec(
        name=name,
        source="/models/none.gguf",
        replicas_min=1,
        replicas_max=1,
        slots=4,
        priority_class=klass,
        profiles=[
            ModelProfile(
                name="default",
                engine="sim",
                gpu=GpuNeed(count=1, min_memory_bytes=20 * GIB),
                startup_timeout_s=60,
                args=list(args),
            )
        ],
    )


async def _ready(admin, model: str):
    rs = [r for r in (await admin.list_replicas(model)).replicas if r.state == "ready"]
    return rs[0] if rs else None


async def test_a_high_class_model_takes_the_card_of_a_low_one_after_its_answers_finish(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        await cluster.start_agent("one-card", fixture="rtx6000_24g_x1")
        await cluster.wait_nodes_ready("one-card")
        async with cluster.admin() as admin:
            await admin.put_model(_spec("small", "low", SLOW))
            await admin.create_tenant("project", PROJECT, parents=True)
            key = await admin.create_key(PROJECT)
            low = await wait_for(lambda: _ready(admin, "small"), attempts=600)
            gpt = openai.AsyncOpenAI(
                base_url=f"http://127.0.0.1:{cluster.server.ports['http']}/v1",
                api_key=key.secret,
                max_retries=0,
            )
            started = [asyncio.Event() for _ in range(3)]

            async def stream(i: int) -> str:
                out = await gpt.chat.completions.create(
                    model="small", messages=[{"role": "user", "content": "hi"}], stream=True
                )
                text = []
                async for chunk in out:
                    if chunk.choices and chunk.choices[0].delta.content:
                        text.append(chunk.choices[0].delta.content)
                        started[i].set()
                    if chunk.choices and chunk.choices[0].finish_reason:
                        finish = chunk.choices[0].finish_reason
                return finish, "".join(text)

            streams = [asyncio.create_task(stream(i)) for i in range(3)]
            await asyncio.gather(*(e.wait() for e in started))

            # The card is taken: the high model gets it by draining the low replica.
            await admin.put_model(_spec("big", "high"))
            answers = await asyncio.gather(*streams)
            assert all(finish == "stop" and text for finish, text in answers), answers
            high = await wait_for(lambda: _ready(admin, "big"), attempts=600)
            assert high.node_id == "one-card" and list(high.gpu_indexes) == [0]

            (old,) = [r for r in (await admin.list_replicas("small")).replicas
                      if r.replica_id == low.replica_id]  # fmt: skip
            reasons = [e.reason for e in old.history]
            assert any(
                "given over to big (class high (200) over low (50)): its cards are needed" in h
                for h in reasons
            ), reasons
            assert any(h.endswith("its requests finished; stopping") for h in reasons), reasons
            assert any(
                e.reason.startswith("waiting for room on node one-card:") for e in high.history
            )
            # The low model waits for room in its turn, saying why.
            view = await admin.get_model("small")
            assert view.state == "unplaceable" and view.replicas_ready == 0
            await gpt.close()


async def test_a_changed_model_on_a_full_node_is_replaced_in_place(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        await cluster.start_agent("one-card", fixture="rtx6000_24g_x1")
        await cluster.wait_nodes_ready("one-card")
        async with cluster.admin() as admin:
            await admin.put_model(_spec("solo", ""))
            first = await wait_for(lambda: _ready(admin, "solo"), attempts=600)
            await admin.set_model_context("solo", 4096)

            async def replaced():
                r = await _ready(admin, "solo")
                return r if r is not None and r.replica_id != first.replica_id else None

            second = await wait_for(replaced, attempts=600, interval_s=0.1)
            assert any(
                e.reason.startswith("waiting for room on node one-card") for e in second.history
            )
            (old,) = [r for r in (await admin.list_replicas("solo")).replicas
                      if r.replica_id == first.replica_id]  # fmt: skip
            assert any("replaced in place by" in e.reason for e in old.history)


async def test_a_restarted_replica_on_a_full_node_finishes_its_answers_and_gives_its_room(
    tmp_path,
):
    async with running_cluster(tmp_path) as cluster:
        await cluster.start_agent("one-card", fixture="rtx6000_24g_x1")
        await cluster.wait_nodes_ready("one-card")
        async with cluster.admin() as admin:
            await admin.put_model(_spec("solo", "", SLOW))
            await admin.create_tenant("project", PROJECT, parents=True)
            key = await admin.create_key(PROJECT)
            first = await wait_for(lambda: _ready(admin, "solo"), attempts=600)
            gpt = openai.AsyncOpenAI(
                base_url=f"http://127.0.0.1:{cluster.server.ports['http']}/v1",
                api_key=key.secret,
                max_retries=0,
            )
            out = await gpt.chat.completions.create(
                model="solo", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            chunks = [await anext(out)]

            # As `llmgw ctl replica restart`: the answer under way finishes first.
            reply = await admin.restart_replica(first.replica_id)
            assert (reply.action, reply.replica.state) == ("replace", "draining")
            chunks += [c async for c in out]
            assert chunks[-1].choices[0].finish_reason == "stop"
            assert "".join(c.choices[0].delta.content or "" for c in chunks)

            async def replaced():
                r = await _ready(admin, "solo")
                return r if r is not None and r.replica_id != first.replica_id else None

            second = await wait_for(replaced, attempts=600, interval_s=0.1)
            assert any(
                e.reason
                == f"waiting for room on node one-card: {first.replica_id} drained to make it"
                for e in second.history
            ), [e.reason for e in second.history]
            (old,) = [r for r in (await admin.list_replicas("solo")).replicas
                      if r.replica_id == first.replica_id]  # fmt: skip
            reasons = [e.reason for e in old.history]
            assert "restarted by the operator; its requests finished; stopping" in reasons, reasons
            await gpt.close()
