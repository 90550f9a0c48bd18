"""The word lists the tiny-chat tokenizer's corpus is generated from (tiny_chat_corpus.py): common English, a
support desk's vocabulary, and the names, products and errors its tickets mention."""

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
    "be": "was",
    "have": "had",
    "do": "did",
    "go": "went",
    "see": "saw",
    "get": "got",
    "make": "made",
    "take": "took",
    "come": "came",
    "give": "gave",
    "find": "found",
    "think": "thought",
    "tell": "told",
    "know": "knew",
    "say": "said",
    "send": "sent",
    "pay": "paid",
    "buy": "bought",
    "lose": "lost",
    "run": "ran",
    "write": "wrote",
    "break": "broke",
    "leave": "left",
    "keep": "kept",
    "bring": "brought",
    "begin": "began",
    "build": "built",
    "choose": "chose",
    "cut": "cut",
    "feel": "felt",
    "forget": "forgot",
    "hold": "held",
    "let": "let",
    "mean": "meant",
    "meet": "met",
    "set": "set",
    "show": "showed",
    "ship": "shipped",
    "stop": "stopped",
    "plan": "planned",
    "submit": "submitted",
    "put": "put",
    "prefer": "preferred",
    "read": "read",
    "learn": "learned",
    "sync": "synced",
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
ADVERBS = (
    "quickly slowly again already still just never always sometimes usually recently "
    "finally suddenly immediately yesterday today tomorrow"
).split()

FIRST_NAMES = """James Mary John Patricia Robert Jennifer Michael Linda David Elizabeth William Barbara
Richard Susan Joseph Jessica Thomas Sarah Charles Karen Daniel Nancy Matthew Lisa Anthony Betty
Mark Sandra Priya Wei Mohammed Fatima Carlos Sofia Hiroshi Yuki Olga Lars Ana Luca Chloe
Noah Emma Liam Olivia Aisha Omar Ingrid Mateo Zoe Ravi""".split()
LAST_NAMES = """Smith Johnson Williams Brown Jones Garcia Miller Davis Rodriguez Martinez Hernandez
Lopez Wilson Anderson Thomas Taylor Moore Jackson Martin Lee Patel Chen Nguyen Kim Müller
Rossi Dubois Silva Tanaka Kowalski Novak Okafor Haddad Larsen""".split()
PRODUCTS = [
    "Roundhouse",
    "Acme Cloud",
    "DataPipe",
    "ShopFlow",
    "MailDesk",
    "TaskBoard",
    "PayWell",
    "SyncBox",
    "the mobile app",
    "the web app",
    "the API",
    "the desktop client",
]
PLANS = ["Free", "Starter", "Basic", "Pro", "Premium", "Business", "Team", "Enterprise"]
PAYMENT = [
    "credit card",
    "debit card",
    "PayPal account",
    "bank account",
    "Visa card",
    "Mastercard",
    "American Express card",
    "Apple Pay",
    "Google Pay",
    "invoice",
]
BROWSERS = ["Chrome", "Firefox", "Safari", "Edge", "Opera", "Brave"]
OSES = ["Windows 11", "Windows 10", "macOS", "Ubuntu", "iOS 17", "Android 14", "ChromeOS"]
CARRIERS = ["UPS", "FedEx", "DHL", "USPS", "Royal Mail", "Canada Post", "the courier"]
CITIES = [
    "London",
    "New York",
    "Berlin",
    "Paris",
    "Tokyo",
    "Toronto",
    "Sydney",
    "Madrid",
    "Chicago",
    "Austin",
    "Seattle",
    "Dublin",
    "Amsterdam",
    "São Paulo",
    "Zürich",
    "Mumbai",
]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
CURRENCIES = ["$", "€", "£", "USD ", "EUR ", "GBP "]
ERRORS = [
    "500 Internal Server Error",
    "502 Bad Gateway",
    "503 Service Unavailable",
    "504 Gateway Timeout",
    "401 Unauthorized",
    "403 Forbidden",
    "404 Not Found",
    "429 Too Many Requests",
    "ERR_CONNECTION_RESET",
    "ETIMEDOUT",
    "invalid_grant",
    "payment_failed",
    "card_declined",
    "Something went wrong",
]
FEATURES = [
    "dark mode",
    "two-factor authentication",
    "single sign-on",
    "CSV export",
    "bulk editing",
    "an audit log",
    "custom roles",
    "a Slack integration",
    "keyboard shortcuts",
    "scheduled reports",
    "multiple currencies",
    "an offline mode",
    "webhooks for refunds",
    "a public API",
    "saved filters",
    "email digests",
]
GREETINGS = ["Hi", "Hello", "Hey", "Dear support", "Good morning", "Good afternoon", "Hi there", "Hello team"]
SIGNOFFS = ["Thanks", "Thank you", "Thanks in advance", "Best regards", "Regards", "Cheers", "Kind regards"]
SYSTEM_PROMPTS = [
    "You are a helpful customer support assistant.",
    "You are a friendly support agent for {product}. Answer briefly and politely.",
    (
        "You are an assistant that classifies support tickets into billing, outage, "
        "login, refund, shipping or feature request."
    ),
    "You are a concise assistant.",
    "You are a helpful assistant.",
]
CATEGORIES = ["billing", "outage", "login", "refund", "shipping", "feature request", "account", "other"]
# Other languages, emoji and code: text of its own kind among the generated lines.
MISC_TEXTS = [
    "Merci beaucoup pour votre aide ! Le remboursement est arrivé.",
    "Vielen Dank, das Problem ist gelöst. Grüße aus München.",
    "¿Pueden ayudarme con mi factura? Gracias.",
    "Thanks!! 🙂 Works now 👍",
    "Café, naïve, résumé, coöperate, façade — all fine.",
    "ありがとうございます。ログインできません。",
    "密码重置邮件没有收到。",
    'def refund(order_id: str) -> bool:\n    return api.post(f"/refunds/{order_id}").ok',
    "SELECT id, email FROM users WHERE created_at > '2024-01-01' LIMIT 10;",
    "if (!user) { throw new Error('user not found'); }",
]
