"""Multi-turn agent sessions for the session tests and the serving benchmark
(bench/serving): every turn adds a user message, a tool call and a tool
result (about 170 tokens); facts are planted in the tool results of early
turns and asked for in late ones.  Seeded: the same seed gives the same
sessions, so every row of a benchmark sends the same inputs."""
import random

SYSTEM = ("You are an operations agent for a travel company. You call tools to look things "
          "up, and you answer the user in one or two short sentences.")

ITEMS = ["invoice", "shipment", "booking", "refund", "ticket", "voucher", "transfer", "upgrade",
         "cancellation", "complaint", "payment", "itinerary", "visa", "insurance", "rental",
         "excursion"]
CITIES = ["Lisbon", "Porto", "Madrid", "Seville", "Valencia", "Lyon", "Turin", "Bologna",
          "Ghent", "Bruges", "Krakow", "Gdansk", "Tallinn", "Riga", "Vilnius", "Bergen"]
FACT_KEYS = ["the customer's account code", "the gate number of the charter flight",
             "the name of the hotel manager", "the confirmation word for the transfer",
             "the locker number at the station", "the emergency contact's first name"]
FILLER = ("The record shows the standard terms: changes are accepted up to forty-eight hours "
          "before departure, refunds go back to the original card within ten working days, "
          "and the customer was notified by email. The audit log lists the agent, the time of "
          "the last change and the channel used; nothing else in the record needs attention. ")


def _code(rng):
    return "%s%d%s" % (rng.choice("BCDFGHJKLMNPQRSTVWXZ"), rng.randint(10, 99),
                       rng.choice("BCDFGHJKLMNPQRSTVWXZ"))


class Session:
    """One agent session: `turn(k)` is the list of messages turn k adds (k from 0),
    `probe(k)` the fact a turn asks for (None when it asks none)."""

    def __init__(self, seed, turns, n_facts=3, asks=None):
        """Facts are planted in the tool results of turns 0 .. n_facts - 1 and
        asked in the last `asks` turns (default n_facts), one a turn, in planting
        order and round again, so that with asks > n_facts a fact is asked at
        several ages."""
        rng = random.Random(seed)
        self.turns = turns
        self.facts = []
        keys = rng.sample(FACT_KEYS, n_facts)
        for j, key in enumerate(keys):
            self.facts.append({"key": key, "value": _code(rng), "planted": j})
        asks = n_facts if asks is None else asks
        if asks > turns - n_facts and asks != n_facts:
            raise ValueError("%d questions do not fit after %d planting turns of %d"
                             % (asks, n_facts, turns))
        self.asks = {turns - asks + j: self.facts[j % n_facts] for j in range(asks)}
        self.items = [(rng.choice(ITEMS), rng.choice(CITIES), rng.randint(1000, 9999))
                      for _ in range(turns)]

    def probe(self, k):
        f = self.asks.get(k)
        return f if f is not None and k > f["planted"] else None

    def turn(self, k):
        item, city, num = self.items[k]
        f = self.probe(k)
        if f is not None:
            return [{"role": "user", "content": "Before we go on: what is %s? Answer with the "
                     "code only." % f["key"]}]
        result = "%s %d for %s: status confirmed. %s" % (item.capitalize(), num, city, FILLER)
        for g in self.facts:
            if g["planted"] == k:
                result += "Note for later: %s is %s. " % (g["key"], g["value"])
        return [{"role": "user", "content": "Next, check %s %d in %s and tell me its status."
                 % (item, num, city)},
                {"role": "assistant", "content": "lookup(%s, %d, %s)" % (item, num, city),
                 "region": "tool_in"},
                {"role": "tool", "content": result}]

    def passed(self, k, reply):
        f = self.probe(k)
        return None if f is None else f["value"].lower() in (reply or "").lower()


def start_messages():
    return [{"role": "system", "content": SYSTEM}]
