"""FcmChannel's in-flight limit (``_Slots``): never more than ``n`` holders, first come first
served, and a waiter cancelled after it was handed a slot passes the slot on."""

from __future__ import annotations

import asyncio

from scheduler.push.fcm import _Slots


def test_at_most_n_in_order_and_a_cancelled_waiter_passes_its_slot_on() -> None:
    async def body() -> None:
        slots = _Slots(2)
        holding: list[int] = []
        order: list[int] = []
        most = 0
        gates = {i: asyncio.Event() for i in range(6)}

        async def hold(i: int) -> None:
            nonlocal most
            await slots.acquire()
            try:
                order.append(i)
                holding.append(i)
                most = max(most, len(holding))
                await gates[i].wait()
            finally:
                holding.remove(i)
                slots.release()

        tasks = [asyncio.create_task(hold(i)) for i in range(6)]
        await asyncio.sleep(0)  # one turn: 0 and 1 hold, 2..5 wait in order
        assert order == [0, 1] and len(slots.waiters) == 4
        gates[0].set()
        gates[1].set()
        await asyncio.sleep(0)  # 0 and 1 end: their slots are handed to 2 and 3 ...
        assert order == [0, 1] and len(slots.waiters) == 2 and slots.free == 0
        tasks[2].cancel()  # ... and 2 is cancelled before it runs: its slot goes to 4
        for i in (3, 4, 5):
            gates[i].set()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert order == [0, 1, 3, 4, 5]
        assert most == 2 and holding == [] and slots.free == 2 and not slots.waiters

    asyncio.run(body())
