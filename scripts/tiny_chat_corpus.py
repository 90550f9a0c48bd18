"""The training corpus of the tiny-chat tokenizer (train_tiny_chat_tokenizer.py), generated from a fixed seed: generic
English plus customer-support-ticket-style text and chat-formatted rows, so no data set is downloaded."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from typing import TypeVar

from tiny_chat_words import (
    ADJECTIVES,
    ADVERBS,
    BROWSERS,
    CARRIERS,
    CATEGORIES,
    CITIES,
    COMMON_WORDS,
    CURRENCIES,
    ERRORS,
    FEATURES,
    FIRST_NAMES,
    GREETINGS,
    IRREGULAR_PAST,
    LAST_NAMES,
    MISC_TEXTS,
    MONTHS,
    NOUNS,
    OSES,
    PAYMENT,
    PLANS,
    PREPOSITIONS,
    PRODUCTS,
    SIGNOFFS,
    SYSTEM_PROMPTS,
    VERBS,
    WEEKDAYS,
)

SEED = 20240607

T = TypeVar("T")


class Gen:
    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)

    def pick(self, xs: Sequence[T]) -> T:
        return self.r.choice(xs)

    # --- slot fillers -------------------------------------------------------------------
    def name(self) -> str:
        return self.pick(FIRST_NAMES)

    def full_name(self) -> str:
        return f"{self.pick(FIRST_NAMES)} {self.pick(LAST_NAMES)}"

    def email(self) -> str:
        first, last = self.pick(FIRST_NAMES).lower(), self.pick(LAST_NAMES).lower()
        dom = self.pick(["example.com", "mail.com", "company.org", "shop.io", "gmail.com", "outlook.com"])
        return f"{first}.{last}@{dom}".replace("ü", "u")

    def amount(self) -> str:
        cur = self.pick(CURRENCIES)
        v = self.pick([9, 12, 19, 25, 29, 49, 59, 99, 120, 149, 199, 249, 499, 1200])
        cents = self.pick(["", ".00", ".99", ".50", f".{self.r.randint(0, 99):02d}"])
        return f"{cur}{v}{cents}"

    def order(self) -> str:
        return self.pick(["#", "ORD-", "order ", "INV-", "TKT-", "", "#A"]) + str(self.r.randint(1000, 9999999))

    def date(self) -> str:
        d, m = self.r.randint(1, 28), self.r.randint(1, 12)
        return self.pick(
            [
                f"{self.pick(MONTHS)} {d}",
                f"{d} {self.pick(MONTHS)}",
                f"2024-{m:02d}-{d:02d}",
                f"{m}/{d}/2024",
                f"last {self.pick(WEEKDAYS)}",
                self.pick(WEEKDAYS),
                "yesterday",
                "this morning",
                "last week",
                "two days ago",
                f"{d}.{m}.2025",
            ]
        )

    def time(self) -> str:
        return self.pick(
            [
                f"{self.r.randint(1, 12)}:{self.r.randint(0, 59):02d} {self.pick(['am', 'pm', 'AM', 'PM'])}",
                f"{self.r.randint(0, 23):02d}:{self.r.randint(0, 59):02d} UTC",
                "noon",
                "midnight",
            ]
        )

    def duration(self) -> str:
        n = self.r.randint(2, 59)
        return self.pick(
            [f"{n} minutes", f"{n} hours", "an hour", "half an hour", "all day", f"{n} days", "over a week"]
        )

    # --- generic English ----------------------------------------------------------------
    def past(self, v: str) -> str:
        if v in IRREGULAR_PAST:
            return IRREGULAR_PAST[v]
        if v.endswith("e"):
            return v + "d"
        if v.endswith("y") and v[-2] not in "aeiou":
            return v[:-1] + "ied"
        return v + "ed"

    def ing(self, v: str) -> str:
        if v in (
            "ship",
            "stop",
            "plan",
            "submit",
            "run",
            "cut",
            "put",
            "set",
            "begin",
            "get",
            "let",
            "prefer",
            "forget",
        ):
            return v + v[-1] + "ing"
        if v.endswith("ie"):
            return v[:-2] + "ying"
        if v.endswith("e") and not v.endswith("ee"):
            return v[:-1] + "ing"
        return v + "ing"

    def plural(self, n: str) -> str:
        if n.endswith(("s", "x", "ch", "sh")):
            return n + "es"
        if n.endswith("y") and n[-2] not in "aeiou":
            return n[:-1] + "ies"
        return n + "s"

    def np(self) -> str:
        n = self.pick(NOUNS + COMMON_WORDS[:200])
        det = self.pick(["the", "a", "my", "our", "your", "this", "that", "every", "some"])
        if self.r.random() < 0.4:
            return f"{det} {self.pick(ADJECTIVES)} {n}"
        if self.r.random() < 0.2:
            return f"{self.pick(['the', 'my', 'our', 'all', 'some', 'two', 'three', 'several'])} {self.plural(n)}"
        return f"{det} {n}"

    def generic_sentence(self) -> str:
        subj = self.pick(
            [
                "I",
                "We",
                "You",
                "They",
                "She",
                "He",
                "It",
                "The team",
                "My manager",
                "Our customer",
                "Everyone",
                "Nobody",
                "The system",
                self.name(),
            ]
        )
        v = self.pick(VERBS)
        form = self.r.random()
        if form < 0.3:
            s = f"{subj} {self.past(v)} {self.np()} {self.pick(PREPOSITIONS)} {self.np()}"
        elif form < 0.5:
            aux = self.pick(
                [
                    "will",
                    "can",
                    "could",
                    "should",
                    "would",
                    "might",
                    "must",
                    "cannot",
                    "can't",
                    "won't",
                    "didn't",
                    "don't",
                ]
            )
            s = f"{subj} {aux} {v} {self.np()}"
        elif form < 0.65:
            s = (
                f"{subj} {self.pick(['is', 'was', 'are', 'were', 'has been', 'have been', 'am'])} "
                f"{self.ing(v)} {self.np()} {self.pick(ADVERBS)}"
            )
        elif form < 0.8:
            s = (
                f"{self.pick(['Why', 'How', 'When', 'Where', 'What', 'Who'])} "
                f"{self.pick(['did', 'does', 'do', 'can', 'should', 'will'])} "
                f"{subj.lower() if subj not in ('I',) and subj not in FIRST_NAMES else subj} {v} "
                f"{self.np()}?"
            )
            return s
        else:
            words = [self.pick(COMMON_WORDS) for _ in range(self.r.randint(5, 14))]
            s = " ".join(words)
            s = s[0].upper() + s[1:]
        end = self.pick([".", ".", ".", "!", "?", "...", ";", ","])
        return s + end

    # --- support tickets -----------------------------------------------------------------
    def ticket_body(self, cat: str) -> str:
        p, o, a, d = self.pick(PRODUCTS), self.order(), self.amount(), self.date()
        if cat == "billing":
            opts = [
                f"I was charged {a} twice for my {self.pick(PLANS)} plan on {d}. Can you check my billing?",
                f"My invoice {o} shows {a} but my plan should only cost {self.amount()} per month.",
                f"Why did my billing date change? I was billed on {d} instead of the usual date.",
                f"Please update the billing address on my account and resend invoice {o}.",
                f'My {self.pick(PAYMENT)} was declined with the error "{self.pick(ERRORS)}" when I tried to pay {a}.',
                (
                    f"I downgraded from {self.pick(PLANS)} to {self.pick(PLANS)} but I'm still being "
                    "billed for the old plan."
                ),
                (
                    f"Can I get a copy of all invoices for {self.pick(MONTHS)}? Our accountant needs "
                    "them for tax purposes."
                ),
                f"There is an unexpected charge of {a} on my statement from {p}. What is it for?",
                f"How do I change the payment method for billing? I want to use my {self.pick(PAYMENT)}.",
                f"The VAT on invoice {o} is wrong. Our company is based in {self.pick(CITIES)}.",
            ]
        elif cat == "outage":
            opts = [
                f'{p} has been down for {self.duration()}. We get "{self.pick(ERRORS)}" on every request.',
                f"Is there an outage? The dashboard won't load since {self.time()} and our team is blocked.",
                (
                    f"We are seeing a major outage in {self.pick(CITIES)}: requests time out after "
                    f"{self.r.randint(5, 120)} seconds."
                ),
                f"Your status page says all systems operational, but {p} returns {self.pick(ERRORS)} for us.",
                f"Since the maintenance window on {d}, syncing has stopped working. Is this a known outage?",
                (
                    f"The API is extremely slow today, latency went from {self.r.randint(50, 300)}ms "
                    f"to {self.r.randint(2, 30)}s."
                ),
                f"Our webhooks stopped arriving {self.duration()} ago. Is the service degraded?",
                "Everything is broken after the update! Nobody on our team can work. Please fix this urgently.",
            ]
        elif cat == "login":
            opts = [
                "I can't log in to my account. It says my password is incorrect but I just reset it.",
                f"The password reset email never arrives. I checked my spam folder. My email is {self.email()}.",
                f"Two-factor authentication codes are not accepted on {self.pick(OSES)} with {self.pick(BROWSERS)}.",
                "My account got locked after too many login attempts. Can you unlock it?",
                f'Single sign-on fails with "{self.pick(ERRORS)}" for everyone in our organization.',
                f"I forgot my password and I no longer have access to {self.email()}. How can I recover my account?",
                f"The login page keeps redirecting me back to the sign in screen in {self.pick(BROWSERS)}.",
                "I changed my phone and lost my authenticator app. How do I log in now?",
                "After changing my password I was logged out of every device, is that expected?",
            ]
        elif cat == "refund":
            opts = [
                f"I would like a refund for order {o}. The item arrived damaged.",
                f"Please refund the {a} I was charged after I cancelled my subscription on {d}.",
                f"When will I receive my refund? It has been {self.duration()} since you approved it.",
                f"I requested a refund for {o} but only got {self.amount()} back instead of {a}.",
                f"Can I get a refund if I cancel my annual {self.pick(PLANS)} plan now?",
                f"The refund went to my old {self.pick(PAYMENT)} which is closed. What happens now?",
                f"I was promised a full refund by your agent {self.name()}. Please process it.",
                f"Your refund policy says 30 days, I bought it {self.r.randint(3, 29)} days ago. Refund please.",
            ]
        elif cat == "shipping":
            opts = [
                f"My order {o} hasn't arrived yet. Tracking shows it has been in {self.pick(CITIES)} since {d}.",
                f"The tracking number from {self.pick(CARRIERS)} doesn't work. Where is my package?",
                (
                    f"I received the wrong item in my shipment. I ordered {self.r.randint(2, 5)} but "
                    f"got {self.r.randint(1, 9)}."
                ),
                f"Can you change the shipping address for order {o}? I moved to {self.pick(CITIES)}.",
                f"Do you ship to {self.pick(CITIES)}? How much is express shipping?",
                f"The package was marked as delivered on {d} but I never received it.",
                f"Shipping was supposed to take {self.r.randint(2, 7)} days, it's been {self.r.randint(8, 30)}.",
                f"The box arrived open and the {self.pick(NOUNS)} inside is missing.",
            ]
        elif cat == "feature request":
            opts = [
                f"It would be great if {p} supported {self.pick(FEATURES)}.",
                (
                    f"Feature request: please add {self.pick(FEATURES)}. Our team of "
                    f"{self.r.randint(3, 500)} would really use it."
                ),
                f"Are there any plans to add {self.pick(FEATURES)}? We are considering switching because of it.",
                "Could you make it possible to export reports as CSV and PDF?",
                f"Suggestion: let admins set {self.pick(FEATURES)} for the whole organization.",
                f"I love the product, but I really miss {self.pick(FEATURES)}. Any chance it's on the roadmap?",
            ]
        elif cat == "account":
            opts = [
                "How do I delete my account and all my data?",
                f"Please change the owner of our workspace to {self.email()}.",
                f"I want to add {self.r.randint(2, 40)} more seats to our {self.pick(PLANS)} plan.",
                f"How can I merge my two accounts? One uses {self.email()}.",
                f"Can you remove {self.full_name()} from our team? They left the company.",
            ]
        else:
            opts = [
                f"How do I connect {p} to our calendar?",
                "Where can I find the API documentation for webhooks?",
                f"Is my data stored in {self.pick(CITIES)} or in the US?",
                f"Just wanted to say your support agent {self.name()} was really helpful, thank you!",
            ]
        body = self.pick(opts)
        if self.r.random() < 0.5:
            body = f"{self.pick(GREETINGS)}{self.pick([',', '!', ''])} {body}"
        if self.r.random() < 0.4:
            body += (
                self.pick([" ", "\n\n", "\n"]) + f"{self.pick(SIGNOFFS)},{self.pick([' ', chr(10)])}{self.full_name()}"
            )
        return body

    def agent_reply(self, cat: str) -> str:
        n = self.name()
        opener = self.pick(
            [
                f"Hi {n}, thanks for reaching out.",
                f"Hello {n},",
                "Thanks for contacting support!",
                f"Hi {n}! Sorry about the trouble.",
                "I'm sorry to hear that.",
                "Thank you for your patience.",
            ]
        )
        body = {
            "billing": [
                f"I've checked your billing history and removed the duplicate charge of {self.amount()}.",
                f"Your next invoice will be issued on {self.date()} and will reflect the new plan.",
                "You can update your payment method under Settings > Billing > Payment methods.",
            ],
            "outage": [
                "We are aware of the outage and our engineers are working on a fix.",
                f"The incident was resolved at {self.time()}. Service is fully restored.",
                "Please check our status page for live updates on the incident.",
            ],
            "login": [
                "I've sent a new password reset link to your email address.",
                "Your account has been unlocked. Please try logging in again.",
                "To reset two-factor authentication, we need to verify your identity first.",
            ],
            "refund": [
                f"I've issued a refund of {self.amount()} to your original payment method.",
                f"Refunds usually take {self.r.randint(3, 10)} business days to appear on your statement.",
                "Unfortunately this order is outside our refund window, but I can offer store credit.",
            ],
            "shipping": [
                f"Your package is with {self.pick(CARRIERS)} and should arrive by {self.date()}.",
                "I've created a replacement order and it will ship today.",
                "I've updated the shipping address on your order.",
            ],
            "feature request": [
                "Thanks for the suggestion! I've shared it with our product team.",
                f"Good news: {self.pick(FEATURES)} is on our roadmap for next quarter.",
                "I've added your vote to this feature request.",
            ],
        }.get(
            cat,
            [
                "Here is a link to our help center article that explains the steps.",
                "I've made that change on your account.",
            ],
        )
        closer = self.pick(
            [
                "Let me know if there is anything else I can help with.",
                "Have a great day!",
                "Best regards,\nSupport Team",
                "",
                "Is there anything else I can do for you?",
            ]
        )
        return " ".join(x for x in [opener, self.pick(body), closer] if x)

    def ticket_record(self) -> str:
        cat = self.pick(CATEGORIES)
        subj = self.pick(
            [
                f"{cat.title()} issue",
                f"Problem with {self.pick(NOUNS)}",
                f"Re: {self.pick(NOUNS)} {self.pick(['not working', 'question', 'help', 'issue'])}",
                f"URGENT: {self.pick(NOUNS)}",
                f"Question about {cat}",
                f"Order {self.order()}",
            ]
        )
        form = self.r.random()
        if form < 0.3:
            return (
                f"Subject: {subj}\nFrom: {self.email()}\nPriority: "
                f"{self.pick(['low', 'normal', 'high', 'urgent'])}\n\n{self.ticket_body(cat)}"
            )
        if form < 0.5:
            return json.dumps(
                {
                    "ticket_id": self.order(),
                    "category": cat,
                    "priority": self.pick(["low", "normal", "high"]),
                    "text": self.ticket_body(cat),
                    "created_at": (
                        f"2024-{self.r.randint(1, 12):02d}-{self.r.randint(1, 28):02d}"
                        f"T{self.r.randint(0, 23):02d}:{self.r.randint(0, 59):02d}:00Z"
                    ),
                },
                ensure_ascii=self.r.random() < 0.2,
            )
        if form < 0.6:
            return f"Ticket {self.order()} [{cat}] - {self.ticket_body(cat)}"
        return self.ticket_body(cat)

    def chat_row(self) -> str:
        """A chat-formatted training row exactly as the chat template renders it."""
        cat = self.pick(CATEGORIES)
        msgs = []
        if self.r.random() < 0.6:
            msgs.append(("system", self.pick(SYSTEM_PROMPTS).format(product=self.pick(PRODUCTS))))
        task = self.r.random()
        if task < 0.35:
            msgs.append(
                ("user", f"Classify this ticket into one of: {', '.join(CATEGORIES)}.\n\n{self.ticket_body(cat)}")
            )
            msgs.append(
                ("assistant", self.pick([cat, f"Category: {cat}", f"{cat}\nConfidence: {self.r.randint(50, 99)}%"]))
            )
        else:
            for _ in range(self.r.randint(1, 3)):
                msgs.append(("user", self.ticket_body(cat)))
                msgs.append(("assistant", self.agent_reply(cat)))
        out = "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in msgs)
        if self.r.random() < 0.3:
            out += "<|endoftext|>"
        return out

    def misc(self) -> str:
        return self.pick(
            [
                f"Order {self.order()} total: {self.amount()} (incl. tax {self.amount()})",
                (
                    f"Contact us at {self.email()} or call +1 ({self.r.randint(200, 999)}) "
                    f"{self.r.randint(200, 999)}-{self.r.randint(1000, 9999)}."
                ),
                (
                    f"https://support.example.com/tickets/{self.r.randint(1000, 99999)}"
                    f"?ref=email&lang={self.pick(['en', 'de', 'fr', 'es'])}"
                ),
                f"Meeting on {self.pick(WEEKDAYS)}, {self.date()} at {self.time()} in {self.pick(CITIES)}.",
                f"Error: {self.pick(ERRORS)} (code {self.r.randint(100, 999)}) at line {self.r.randint(1, 500)}",
                f"- [{self.pick([' ', 'x'])}] {self.pick(VERBS).capitalize()} the {self.pick(NOUNS)} by {self.date()}",
                f"{self.r.randint(1, 100)}% of customers rated us {self.r.randint(1, 5)}/5 in {self.pick(MONTHS)}.",
                f"Q{self.r.randint(1, 4)} revenue grew {self.r.randint(1, 40)}.{self.r.randint(0, 9)}% year over year.",
                *MISC_TEXTS,
            ]
        )


def corpus(
    seed: int = SEED, n_generic: int = 12000, n_tickets: int = 9000, n_chat: int = 4000, n_misc: int = 1500
) -> Iterator[str]:
    g = Gen(seed)
    # 1) Every common word a few times, bare and with a leading space / capitalised.
    for w in COMMON_WORDS + VERBS + ADJECTIVES + NOUNS:
        yield f"{w} {w.capitalize()} {w}."
    # 2) Keyword lists (one word per line, so the bare, no-leading-space form of the
    #    support vocabulary is frequent too: "password" as well as " password").
    vocab = NOUNS + VERBS + CATEGORIES
    for _ in range(100):
        ws = list(vocab)
        g.r.shuffle(ws)
        for i in range(0, len(ws), 8):
            yield "\n".join(w if g.r.random() < 0.7 else w.capitalize() for w in ws[i : i + 8])
    kinds = ["generic"] * n_generic + ["ticket"] * n_tickets + ["chat"] * n_chat + ["misc"] * n_misc
    g.r.shuffle(kinds)
    for k in kinds:
        if k == "generic":
            yield " ".join(g.generic_sentence() for _ in range(g.r.randint(1, 4)))
        elif k == "ticket":
            yield g.ticket_record()
        elif k == "chat":
            yield g.chat_row()
        else:
            yield g.misc()
