#!/usr/bin/env python3
"""Train the byte-level BPE tokenizer of the emulator model `roundhouse/tiny-chat`.

Reproducible and offline: the training corpus is generated here from a fixed seed
(generic English plus customer-support-ticket-style text and chat-formatted rows),
so no data set is downloaded.

    python3 -m venv /tmp/venv-tok && /tmp/venv-tok/bin/pip install tokenizers==0.23.3
    (other tokenizers versions train the same way; the byte-identical output, sha256
    1951f45a0e0e54def0aa965399296a4b8f4cde8eb3fbaf66a880d7605edf460a, was checked with 0.23.3)
    /tmp/venv-tok/bin/python train_tiny_chat_tokenizer.py [--out DIR] [--vocab-size 4096]
                                                          [--dump-corpus FILE]

Writes DIR/tokenizer.json, DIR/tokenizer_config.json, DIR/special_tokens_map.json and
DIR/generation_config.json (DIR defaults to ./tiny-chat next to this script).

Design (Qwen2-like, minus the NFC normalizer so that ANY string round-trips exactly):
  * normalizer: none
  * pre-tokenizer: Qwen2 split regex (single digits, words carry their leading
    space/punctuation byte) then ByteLevel(add_prefix_space=False, use_regex=False)
  * model: BPE over the 256-byte alphabet (every byte is in the vocab, so there is no
    unknown token and decoding(encoding(x)) == x for every x)
  * post-processor: ByteLevel (adds no BOS/EOS; chat rows get their markers from the
    chat template, EOS is appended explicitly by the caller)
  * decoder: ByteLevel
  * special tokens: <|endoftext|> (id 0, EOS/PAD), <|im_start|> (1), <|im_end|> (2)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import sys
from typing import Iterator, List

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

SEED = 20240607
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2's pre-tokenisation pattern (the one in Qwen2/Qwen2.5/Qwen3 tokenizer.json files).
SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# --------------------------------------------------------------------------------------
# Word lists
# --------------------------------------------------------------------------------------
COMMON_WORDS = """
the of and to a in is it you that he was for on are with as his they be at one have this
from or had by hot word but what some we can out other were all there when up use your how
said an each she which do their time if will way about many then them write would like so
these her long make thing see him two has look more day could go come did number sound no
most people my over know water than call first who may down side been now find any new
work part take get place made live where after back little only round man year came show
every good me give our under name very through just form sentence great think say help low
line differ turn cause much mean before move right boy old too same tell does set three
want air well also play small end put home read hand port large spell add even land here
must big high such follow act why ask men change went light kind off need house picture
try us again animal point mother world near build self earth father head stand own page
should country found answer school grow study still learn plant cover food sun four
between state keep eye never last let thought city tree cross farm hard start might story
saw far sea draw left late run while press close night real life few north open seem
together next white children begin got walk example ease paper group always music those
both mark often letter until mile river car feet care second book carry took science eat
room friend began idea fish mountain stop once base hear horse cut sure watch color face
wood main enough plain girl usual young ready above ever red list though feel talk bird
soon body dog family direct pose leave song measure door product black short numeral class
wind question happen complete ship area half rock order fire south problem piece told knew
pass since top whole king space heard best hour better true during hundred five remember
step early hold west ground interest reach fast verb sing listen six table travel less
morning ten simple several vowel toward war lay against pattern slow center love person
money serve appear road map rain rule govern pull cold notice voice unit power town fine
certain fly fall lead cry dark machine note wait plan figure star box noun field rest
correct able pound done beauty drive stood contain front teach week final gave green oh
quick develop ocean warm free minute strong special mind behind clear tail produce fact
street inch multiply nothing course stay wheel full force blue object decide surface deep
moon island foot system busy test record boat common gold possible plane stead dry wonder
laugh thousand ago ran check game shape equate miss brought heat snow tire bring yes
distant fill east paint language among grand ball yet wave drop heart am present heavy
dance engine position arm wide sail material size vary settle speak weight general ice
matter circle pair include divide syllable felt perhaps pick sudden count square reason
length represent art subject region energy hunt probable bed brother egg ride cell believe
fraction forest sit race window store summer train sleep prove lone leg exercise wall catch
mount wish sky board joy winter sat written wild instrument kept glass grass cow job edge
sign visit past soft fun bright gas weather month million bear finish happy hope flower
clothe strange gone jump baby eight village meet root buy raise solve metal whether push
seven paragraph third shall held hair describe cook floor either result burn hill safe cat
century consider type law bit coast copy phrase silent tall sand soil roll temperature
finger industry value fight lie beat excite natural view sense ear else quite broke case
middle kill son lake moment scale loud spring observe child straight consonant nation
dictionary milk speed method organ pay age section dress cloud surprise quiet stone tiny
climb cool design poor lot experiment bottom key iron single stick flat twenty skin smile
crease hole trade melody trip office receive row mouth exact symbol die least trouble shout
except wrote seed tone join suggest clean break lady yard rise bad blow oil blood touch grew
cent mix team wire cost lost brown wear garden equal sent choose fell fit flow fair bank
collect save control decimal gentle woman captain practice separate difficult doctor please
protect noon whose locate ring character insect caught period indicate radio spoke atom
human history effect electric expect crop modern element hit student corner party supply
bone rail imagine provide agree thus capital chair danger fruit rich thick soldier process
operate guess necessary sharp wing create neighbor wash bat rather crowd corn compare poem
string bell depend meat rub tube famous dollar stream fear sight thin triangle planet hurry
chief colony clock mine tie enter major fresh search send yellow gun allow print dead spot
desert suit current lift rose continue block chart hat sell success company subtract event
particular deal swim term opposite wife shoe shoulder spread arrange camp invent cotton born
determine quart nine truck noise level chance gather shop stretch throw shine property
column molecule select wrong gray repeat require broad prepare salt nose plural anger claim
continent oxygen sugar death pretty skill women season solution magnet silver thank branch
match suffix especially fig afraid huge sister steel discuss forward similar guide
experience score apple bought led pitch coat mass card band rope slip win dream evening
condition feed tool total basic smell valley nor double seat arrive master track parent
shore division sheet substance favor connect post spend chord fat glad original share
station dad bread charge proper bar offer segment slave duck instant market degree populate
chick dear enemy reply drink occur support speech nature range steam motion path liquid log
meant quotient teeth shell neck today tomorrow yesterday because however although therefore
actually really already something someone anything everything nothing everyone important
information business service customer problem issue account report email message support
""".split()

IRREGULAR_PAST = {
    "be": "was", "have": "had", "do": "did", "go": "went", "see": "saw", "get": "got",
    "make": "made", "take": "took", "come": "came", "give": "gave", "find": "found",
    "think": "thought", "tell": "told", "know": "knew", "say": "said", "send": "sent",
    "pay": "paid", "buy": "bought", "lose": "lost", "run": "ran", "write": "wrote",
    "break": "broke", "leave": "left", "keep": "kept", "bring": "brought", "begin": "began",
    "build": "built", "choose": "chose", "cut": "cut", "feel": "felt", "forget": "forgot",
    "hold": "held", "let": "let", "mean": "meant", "meet": "met", "set": "set", "show": "showed",
    "ship": "shipped", "stop": "stopped", "plan": "planned", "submit": "submitted", "put": "put",
    "prefer": "preferred", "read": "read", "learn": "learned", "sync": "synced",
}
VERBS = """
accept add allow answer appear arrive ask begin believe break bring build buy call cancel
carry change charge check choose clean close come complete confirm connect consider contact
continue create cut decide deliver describe design develop disable download edit enable
enter expect explain export fail feel fill find finish fix follow forget get give go happen
help hold import include install join keep know learn leave let like load lose make manage
mean meet migrate miss move need notice offer open order pay plan play prefer process
provide publish receive reset recover refund remember remove renew replace reply report
request require resolve restart restore return review run save say schedule see send
share ship show sign start stop submit subscribe suggest support switch sync take talk
tell test think track transfer try turn update upgrade upload use verify wait want watch
work write
""".split()
ADJECTIVES = """
new old good bad great small large big long short quick slow early late easy hard simple
clear important possible available different same final full free recent current monthly
annual weekly daily previous next last first second wrong correct broken missing extra
duplicate unexpected incorrect expired invalid valid secure slow fast urgent minor major
critical frustrating helpful annoying confusing unclear detailed simple premium basic
personal corporate mobile online offline temporary permanent partial whole quiet busy
happy sorry grateful disappointed surprised worried
""".split()
NOUNS = """
account bill invoice charge payment card subscription plan refund order package shipment
delivery address password login email phone number code link page app website dashboard
report file export import data setting profile team user admin member seat license key
token session browser device laptop server service outage incident error message screen
button form feature request update version release week month day hour minute morning
evening customer agent ticket case issue problem question answer help support manager
company business store product item warehouse courier tracking label receipt discount
coupon price fee tax credit balance statement bank transfer wallet notification reminder
integration webhook api request response timeout network connection region database backup
calendar meeting project document folder workspace organization channel inbox queue
""".split()
PREPOSITIONS = "in on at for with from to after before during about since without under over into through".split()
ADVERBS = "quickly slowly again already still just never always sometimes usually recently finally suddenly immediately yesterday today tomorrow".split()

FIRST_NAMES = """James Mary John Patricia Robert Jennifer Michael Linda David Elizabeth William Barbara
Richard Susan Joseph Jessica Thomas Sarah Charles Karen Daniel Nancy Matthew Lisa Anthony Betty
Mark Sandra Priya Wei Mohammed Fatima Carlos Sofia Hiroshi Yuki Olga Lars Ana Luca Chloe
Noah Emma Liam Olivia Aisha Omar Ingrid Mateo Zoe Ravi""".split()
LAST_NAMES = """Smith Johnson Williams Brown Jones Garcia Miller Davis Rodriguez Martinez Hernandez
Lopez Wilson Anderson Thomas Taylor Moore Jackson Martin Lee Patel Chen Nguyen Kim Müller
Rossi Dubois Silva Tanaka Kowalski Novak Okafor Haddad Larsen""".split()
PRODUCTS = ["Roundhouse", "Acme Cloud", "DataPipe", "ShopFlow", "MailDesk", "TaskBoard",
            "PayWell", "SyncBox", "the mobile app", "the web app", "the API", "the desktop client"]
PLANS = ["Free", "Starter", "Basic", "Pro", "Premium", "Business", "Team", "Enterprise"]
PAYMENT = ["credit card", "debit card", "PayPal account", "bank account", "Visa card",
           "Mastercard", "American Express card", "Apple Pay", "Google Pay", "invoice"]
BROWSERS = ["Chrome", "Firefox", "Safari", "Edge", "Opera", "Brave"]
OSES = ["Windows 11", "Windows 10", "macOS", "Ubuntu", "iOS 17", "Android 14", "ChromeOS"]
CARRIERS = ["UPS", "FedEx", "DHL", "USPS", "Royal Mail", "Canada Post", "the courier"]
CITIES = ["London", "New York", "Berlin", "Paris", "Tokyo", "Toronto", "Sydney", "Madrid",
          "Chicago", "Austin", "Seattle", "Dublin", "Amsterdam", "São Paulo", "Zürich", "Mumbai"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
CURRENCIES = ["$", "€", "£", "USD ", "EUR ", "GBP "]
ERRORS = ["500 Internal Server Error", "502 Bad Gateway", "503 Service Unavailable",
          "504 Gateway Timeout", "401 Unauthorized", "403 Forbidden", "404 Not Found",
          "429 Too Many Requests", "ERR_CONNECTION_RESET", "ETIMEDOUT", "invalid_grant",
          "payment_failed", "card_declined", "Something went wrong"]
FEATURES = ["dark mode", "two-factor authentication", "single sign-on", "CSV export",
            "bulk editing", "an audit log", "custom roles", "a Slack integration",
            "keyboard shortcuts", "scheduled reports", "multiple currencies", "an offline mode",
            "webhooks for refunds", "a public API", "saved filters", "email digests"]
GREETINGS = ["Hi", "Hello", "Hey", "Dear support", "Good morning", "Good afternoon", "Hi there", "Hello team"]
SIGNOFFS = ["Thanks", "Thank you", "Thanks in advance", "Best regards", "Regards", "Cheers", "Kind regards"]
SYSTEM_PROMPTS = [
    "You are a helpful customer support assistant.",
    "You are a friendly support agent for {product}. Answer briefly and politely.",
    "You are an assistant that classifies support tickets into billing, outage, login, refund, shipping or feature request.",
    "You are a concise assistant.",
    "You are a helpful assistant.",
]
CATEGORIES = ["billing", "outage", "login", "refund", "shipping", "feature request", "account", "other"]


class Gen:
    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)

    def pick(self, xs):
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
        return self.pick([
            f"{self.pick(MONTHS)} {d}", f"{d} {self.pick(MONTHS)}", f"2024-{m:02d}-{d:02d}",
            f"{m}/{d}/2024", f"last {self.pick(WEEKDAYS)}", self.pick(WEEKDAYS), "yesterday",
            "this morning", "last week", "two days ago", f"{d}.{m}.2025",
        ])

    def time(self) -> str:
        return self.pick([f"{self.r.randint(1, 12)}:{self.r.randint(0, 59):02d} {self.pick(['am', 'pm', 'AM', 'PM'])}",
                          f"{self.r.randint(0, 23):02d}:{self.r.randint(0, 59):02d} UTC", "noon", "midnight"])

    def duration(self) -> str:
        n = self.r.randint(2, 59)
        return self.pick([f"{n} minutes", f"{n} hours", "an hour", "half an hour", "all day", f"{n} days", "over a week"])

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
        if v in ("ship", "stop", "plan", "submit", "run", "cut", "put", "set", "begin", "get", "let", "prefer", "forget"):
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
        subj = self.pick(["I", "We", "You", "They", "She", "He", "It", "The team", "My manager",
                          "Our customer", "Everyone", "Nobody", "The system", self.name()])
        v = self.pick(VERBS)
        form = self.r.random()
        if form < 0.3:
            s = f"{subj} {self.past(v)} {self.np()} {self.pick(PREPOSITIONS)} {self.np()}"
        elif form < 0.5:
            aux = self.pick(["will", "can", "could", "should", "would", "might", "must", "cannot", "can't", "won't", "didn't", "don't"])
            s = f"{subj} {aux} {v} {self.np()}"
        elif form < 0.65:
            s = f"{subj} {self.pick(['is', 'was', 'are', 'were', 'has been', 'have been', 'am'])} {self.ing(v)} {self.np()} {self.pick(ADVERBS)}"
        elif form < 0.8:
            s = f"{self.pick(['Why', 'How', 'When', 'Where', 'What', 'Who'])} {self.pick(['did', 'does', 'do', 'can', 'should', 'will'])} {subj.lower() if subj not in ('I',) and subj not in FIRST_NAMES else subj} {v} {self.np()}?"
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
                f"My {self.pick(PAYMENT)} was declined with the error \"{self.pick(ERRORS)}\" when I tried to pay {a}.",
                f"I downgraded from {self.pick(PLANS)} to {self.pick(PLANS)} but I'm still being billed for the old plan.",
                f"Can I get a copy of all invoices for {self.pick(MONTHS)}? Our accountant needs them for tax purposes.",
                f"There is an unexpected charge of {a} on my statement from {p}. What is it for?",
                f"How do I change the payment method for billing? I want to use my {self.pick(PAYMENT)}.",
                f"The VAT on invoice {o} is wrong. Our company is based in {self.pick(CITIES)}.",
            ]
        elif cat == "outage":
            opts = [
                f"{p} has been down for {self.duration()}. We get \"{self.pick(ERRORS)}\" on every request.",
                f"Is there an outage? The dashboard won't load since {self.time()} and our team is blocked.",
                f"We are seeing a major outage in {self.pick(CITIES)}: requests time out after {self.r.randint(5, 120)} seconds.",
                f"Your status page says all systems operational, but {p} returns {self.pick(ERRORS)} for us.",
                f"Since the maintenance window on {d}, syncing has stopped working. Is this a known outage?",
                f"The API is extremely slow today, latency went from {self.r.randint(50, 300)}ms to {self.r.randint(2, 30)}s.",
                f"Our webhooks stopped arriving {self.duration()} ago. Is the service degraded?",
                f"Everything is broken after the update! Nobody on our team can work. Please fix this urgently.",
            ]
        elif cat == "login":
            opts = [
                f"I can't log in to my account. It says my password is incorrect but I just reset it.",
                f"The password reset email never arrives. I checked my spam folder. My email is {self.email()}.",
                f"Two-factor authentication codes are not accepted on {self.pick(OSES)} with {self.pick(BROWSERS)}.",
                f"My account got locked after too many login attempts. Can you unlock it?",
                f"Single sign-on fails with \"{self.pick(ERRORS)}\" for everyone in our organization.",
                f"I forgot my password and I no longer have access to {self.email()}. How can I recover my account?",
                f"The login page keeps redirecting me back to the sign in screen in {self.pick(BROWSERS)}.",
                f"I changed my phone and lost my authenticator app. How do I log in now?",
                f"After changing my password I was logged out of every device, is that expected?",
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
                f"I received the wrong item in my shipment. I ordered {self.r.randint(2, 5)} but got {self.r.randint(1, 9)}.",
                f"Can you change the shipping address for order {o}? I moved to {self.pick(CITIES)}.",
                f"Do you ship to {self.pick(CITIES)}? How much is express shipping?",
                f"The package was marked as delivered on {d} but I never received it.",
                f"Shipping was supposed to take {self.r.randint(2, 7)} days, it's been {self.r.randint(8, 30)}.",
                f"The box arrived open and the {self.pick(NOUNS)} inside is missing.",
            ]
        elif cat == "feature request":
            opts = [
                f"It would be great if {p} supported {self.pick(FEATURES)}.",
                f"Feature request: please add {self.pick(FEATURES)}. Our team of {self.r.randint(3, 500)} would really use it.",
                f"Are there any plans to add {self.pick(FEATURES)}? We are considering switching because of it.",
                f"Could you make it possible to export reports as CSV and PDF?",
                f"Suggestion: let admins set {self.pick(FEATURES)} for the whole organization.",
                f"I love the product, but I really miss {self.pick(FEATURES)}. Any chance it's on the roadmap?",
            ]
        elif cat == "account":
            opts = [
                f"How do I delete my account and all my data?",
                f"Please change the owner of our workspace to {self.email()}.",
                f"I want to add {self.r.randint(2, 40)} more seats to our {self.pick(PLANS)} plan.",
                f"How can I merge my two accounts? One uses {self.email()}.",
                f"Can you remove {self.full_name()} from our team? They left the company.",
            ]
        else:
            opts = [
                f"How do I connect {p} to our calendar?",
                f"Where can I find the API documentation for webhooks?",
                f"Is my data stored in {self.pick(CITIES)} or in the US?",
                f"Just wanted to say your support agent {self.name()} was really helpful, thank you!",
            ]
        body = self.pick(opts)
        if self.r.random() < 0.5:
            body = f"{self.pick(GREETINGS)}{self.pick([',', '!', ''])} {body}"
        if self.r.random() < 0.4:
            body += self.pick([" ", "\n\n", "\n"]) + f"{self.pick(SIGNOFFS)},{self.pick([' ', chr(10)])}{self.full_name()}"
        return body

    def agent_reply(self, cat: str) -> str:
        n = self.name()
        opener = self.pick([f"Hi {n}, thanks for reaching out.", f"Hello {n},", "Thanks for contacting support!",
                            f"Hi {n}! Sorry about the trouble.", "I'm sorry to hear that.", "Thank you for your patience."])
        body = {
            "billing": [f"I've checked your billing history and removed the duplicate charge of {self.amount()}.",
                        f"Your next invoice will be issued on {self.date()} and will reflect the new plan.",
                        "You can update your payment method under Settings > Billing > Payment methods."],
            "outage": ["We are aware of the outage and our engineers are working on a fix.",
                       f"The incident was resolved at {self.time()}. Service is fully restored.",
                       "Please check our status page for live updates on the incident."],
            "login": ["I've sent a new password reset link to your email address.",
                      "Your account has been unlocked. Please try logging in again.",
                      "To reset two-factor authentication, we need to verify your identity first."],
            "refund": [f"I've issued a refund of {self.amount()} to your original payment method.",
                       f"Refunds usually take {self.r.randint(3, 10)} business days to appear on your statement.",
                       "Unfortunately this order is outside our refund window, but I can offer store credit."],
            "shipping": [f"Your package is with {self.pick(CARRIERS)} and should arrive by {self.date()}.",
                         "I've created a replacement order and it will ship today.",
                         "I've updated the shipping address on your order."],
            "feature request": ["Thanks for the suggestion! I've shared it with our product team.",
                                f"Good news: {self.pick(FEATURES)} is on our roadmap for next quarter.",
                                "I've added your vote to this feature request."],
        }.get(cat, ["Here is a link to our help center article that explains the steps.",
                    "I've made that change on your account."])
        closer = self.pick(["Let me know if there is anything else I can help with.", "Have a great day!",
                            "Best regards,\nSupport Team", "", "Is there anything else I can do for you?"])
        return " ".join(x for x in [opener, self.pick(body), closer] if x)

    def ticket_record(self) -> str:
        cat = self.pick(CATEGORIES)
        subj = self.pick([f"{cat.title()} issue", f"Problem with {self.pick(NOUNS)}", f"Re: {self.pick(NOUNS)} {self.pick(['not working', 'question', 'help', 'issue'])}",
                          f"URGENT: {self.pick(NOUNS)}", f"Question about {cat}", f"Order {self.order()}"])
        form = self.r.random()
        if form < 0.3:
            return f"Subject: {subj}\nFrom: {self.email()}\nPriority: {self.pick(['low', 'normal', 'high', 'urgent'])}\n\n{self.ticket_body(cat)}"
        if form < 0.5:
            return json.dumps({"ticket_id": self.order(), "category": cat, "priority": self.pick(["low", "normal", "high"]),
                               "text": self.ticket_body(cat), "created_at": f"2024-{self.r.randint(1, 12):02d}-{self.r.randint(1, 28):02d}T{self.r.randint(0, 23):02d}:{self.r.randint(0, 59):02d}:00Z"},
                              ensure_ascii=self.r.random() < 0.2)
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
            msgs.append(("user", f"Classify this ticket into one of: {', '.join(CATEGORIES)}.\n\n{self.ticket_body(cat)}"))
            msgs.append(("assistant", self.pick([cat, f"Category: {cat}", f"{cat}\nConfidence: {self.r.randint(50, 99)}%"])))
        else:
            for _ in range(self.r.randint(1, 3)):
                msgs.append(("user", self.ticket_body(cat)))
                msgs.append(("assistant", self.agent_reply(cat)))
        out = "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in msgs)
        if self.r.random() < 0.3:
            out += "<|endoftext|>"
        return out

    def misc(self) -> str:
        return self.pick([
            f"Order {self.order()} total: {self.amount()} (incl. tax {self.amount()})",
            f"Contact us at {self.email()} or call +1 ({self.r.randint(200, 999)}) {self.r.randint(200, 999)}-{self.r.randint(1000, 9999)}.",
            f"https://support.example.com/tickets/{self.r.randint(1000, 99999)}?ref=email&lang={self.pick(['en', 'de', 'fr', 'es'])}",
            f"Meeting on {self.pick(WEEKDAYS)}, {self.date()} at {self.time()} in {self.pick(CITIES)}.",
            f"Error: {self.pick(ERRORS)} (code {self.r.randint(100, 999)}) at line {self.r.randint(1, 500)}",
            f"- [{self.pick([' ', 'x'])}] {self.pick(VERBS).capitalize()} the {self.pick(NOUNS)} by {self.date()}",
            f"{self.r.randint(1, 100)}% of customers rated us {self.r.randint(1, 5)}/5 in {self.pick(MONTHS)}.",
            f"Q{self.r.randint(1, 4)} revenue grew {self.r.randint(1, 40)}.{self.r.randint(0, 9)}% year over year.",
            "Merci beaucoup pour votre aide ! Le remboursement est arrivé.",
            "Vielen Dank, das Problem ist gelöst. Grüße aus München.",
            "¿Pueden ayudarme con mi factura? Gracias.",
            "Thanks!! 🙂 Works now 👍",
            "Café, naïve, résumé, coöperate, façade — all fine.",
            "ありがとうございます。ログインできません。",
            "密码重置邮件没有收到。",
            "def refund(order_id: str) -> bool:\n    return api.post(f\"/refunds/{order_id}\").ok",
            "SELECT id, email FROM users WHERE created_at > '2024-01-01' LIMIT 10;",
            "if (!user) { throw new Error('user not found'); }",
        ])


def corpus(seed: int = SEED, n_generic: int = 12000, n_tickets: int = 9000, n_chat: int = 4000, n_misc: int = 1500) -> Iterator[str]:
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
            yield "\n".join(w if g.r.random() < 0.7 else w.capitalize() for w in ws[i:i + 8])
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


def build_tokenizer(vocab_size: int, lines: List[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        show_progress=False,
        special_tokens=SPECIAL_TOKENS,  # ids 0, 1, 2
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes: lossless for any text
        max_token_length=16,
    )
    # The trainer does not split out special tokens: feed the text between them only,
    # so no merges are wasted on pieces like "<|", "im" or "|>".
    special = re.compile("|".join(re.escape(t) for t in SPECIAL_TOKENS))
    pieces = [p for line in lines for p in special.split(line) if p]
    tok.train_from_iterator(pieces, trainer=trainer, length=len(pieces))
    return tok


def write_configs(out: str, tok: Tokenizer) -> None:
    added = {
        str(tok.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                  "single_word": False, "special": True}
        for t in SPECIAL_TOKENS
    }
    cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,  # keep decode(encode(x)) == x
        "eos_token": "<|endoftext|>",
        "errors": "replace",
        "model_max_length": 2048,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(out, "special_tokens_map.json"), "w", encoding="utf-8") as f:
        json.dump({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
                   "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}, f, indent=2)
        f.write("\n")
    with open(os.path.join(out, "generation_config.json"), "w", encoding="utf-8") as f:
        # A chat turn ends with <|im_end|>; a document with <|endoftext|>.
        json.dump({"eos_token_id": [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")],
                   "pad_token_id": tok.token_to_id("<|endoftext|>"), "bos_token_id": None}, f, indent=2)
        f.write("\n")


def self_check(tok: Tokenizer) -> None:
    samples = [
        "", " ", "\n\n", "Hello world", "  leading and trailing  ", "I can't log in!!",
        "Refund €49.99 for order #A123456 — thanks 🙂", "naïve café Zürich São Paulo ü", "e\u0301 (decomposed)",
        "日本語のテキスト", "tabs\tand\r\nCRLF", "\u0000\u0001\u007f\ufffd", "<|im_start|>user\nhi<|im_end|>\n",
    ]
    for s in samples:
        ids = tok.encode(s, add_special_tokens=False).ids
        back = tok.decode(ids, skip_special_tokens=False)
        assert back == s, (s, back, ids)
    for w in ["billing", "refund", "password", "outage", "login", "shipping", "invoice", "account"]:
        for v in (w, " " + w):
            n = len(tok.encode(v, add_special_tokens=False).ids)
            assert 1 <= n <= 2, (v, n, tok.encode(v).tokens)
    for t in SPECIAL_TOKENS:
        assert tok.encode(t).ids == [tok.token_to_id(t)], t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny-chat"))
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--dump-corpus", default=None, help="also write the generated corpus to this file")
    args = ap.parse_args()

    lines = list(corpus())
    if args.dump_corpus:
        with open(args.dump_corpus, "w", encoding="utf-8") as f:
            for line in lines:
                f.write(line.replace("\n", "\\n") + "\n")
    tok = build_tokenizer(args.vocab_size, lines)
    self_check(tok)

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "tokenizer.json")
    # Compact JSON (one line): about half the size of the pretty-printed form.
    with open(path, "w", encoding="utf-8") as f:
        f.write(tok.to_str(pretty=False))
    write_configs(args.out, tok)

    data = open(path, "rb").read()
    print(json.dumps({
        "tokenizer_json": path,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "corpus_lines": len(lines),
        "corpus_chars": sum(len(x) for x in lines),
        "special_tokens": {t: tok.token_to_id(t) for t in SPECIAL_TOKENS},
    }, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
