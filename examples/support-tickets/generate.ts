/**
 * Generates the support-ticket classifier data (the Baseten guide's example, enlarged): short tickets, each
 * labelled with one of five categories. The held-out eval set is worded apart from training: a ticket's
 * "subject + problem" sentence is one of 36 per category, and a third of them (`heldOutPhrasing`) appear only in
 * eval rows, the rest only in training rows. Each subject and each problem phrase belongs to one category and is
 * seen in training (never in that combination), so eval accuracy measures phrase-to-label recall in new
 * combinations, not an understanding of tickets worded in phrases training never showed.
 * Deterministic: `npx tsx examples/support-tickets/generate.ts [trainRows] [evalRows] [outDir]`.
 */
import fs from 'node:fs';
import path from 'node:path';
import { seededRandom } from '../../config/rules/random';

const CATEGORIES: Record<string, { subjects: string[]; problems: string[] }> = {
  billing: {
    subjects: ['my invoice', 'the last bill', 'my credit card', 'the subscription charge', 'my payment', 'the monthly fee'],
    problems: [
      'was charged twice',
      'shows the wrong amount',
      'has an unexpected fee',
      'was billed after I cancelled',
      'does not match my plan',
      'includes tax I should not pay',
    ],
  },
  outage: {
    subjects: ['the dashboard', 'the API', 'your website', 'the mobile app', 'the sync service', 'the upload page'],
    problems: [
      'is down for everyone',
      'returns server errors',
      'has been unavailable since morning',
      'times out on every request',
      'shows a blank page',
      'stopped responding',
    ],
  },
  login: {
    subjects: ['my account', 'the sign-in page', 'my password', 'two-factor authentication', 'the login link', 'my username'],
    problems: [
      'will not let me sign in',
      'says my password is wrong',
      'keeps asking for a code',
      'locked me out',
      'rejects my reset email',
      'logs me out immediately',
    ],
  },
  shipping: {
    subjects: ['my order', 'the package', 'the delivery', 'my parcel', 'the tracking number', 'the shipment'],
    problems: [
      'has not arrived yet',
      'went to the wrong address',
      'is stuck in transit',
      'arrived damaged',
      'shows no tracking updates',
      'is two weeks late',
    ],
  },
  refund: {
    subjects: ['my return', 'the refund request', 'the cancelled order', 'the returned item', 'my money back', 'the store credit'],
    problems: [
      'was approved but never paid',
      'is still pending after a month',
      'was refused without reason',
      'came back as the wrong amount',
      'has no status update',
      'went to an old card',
    ],
  },
};

const OPENERS = ['Hello,', 'Hi team,', 'Urgent:', 'Please help:', 'Good morning,', 'Hey,', 'Question:', 'Support,'];
const CLOSERS = [
  'Thanks.',
  'Please advise.',
  'What should I do?',
  'Can you fix this?',
  'This is frustrating.',
  'Any update?',
  'Regards.',
  '',
];

/** Whether a subject/problem combination is held out (worded only in eval rows): a third of them, spread evenly. */
export function heldOutPhrasing(subject: number, problem: number): boolean {
  return (subject + 2 * problem) % 3 === 0;
}

export function generateTickets(
  count: number,
  seed: number,
  exclude = new Set<string>(),
  phrasings: 'train' | 'held-out' | 'all' = 'all',
): { prompt: string; answer: string }[] {
  const random = seededRandom(seed);
  const pick = <T>(xs: T[]) => xs[Math.floor(random() * xs.length)]!;
  const labels = Object.keys(CATEGORIES);
  const rows: { prompt: string; answer: string }[] = [];
  const seen = new Set(exclude);
  for (let attempts = 0; rows.length < count && attempts < count * 50; attempts++) {
    const label = labels[rows.length % labels.length]!;
    const c = CATEGORIES[label]!;
    const subject = Math.floor(random() * c.subjects.length);
    const problem = Math.floor(random() * c.problems.length);
    if (phrasings !== 'all' && heldOutPhrasing(subject, problem) !== (phrasings === 'held-out')) continue;
    const ticket = [pick(OPENERS), `${c.subjects[subject]} ${c.problems[problem]}.`, pick(CLOSERS)].filter(Boolean).join(' ');
    const prompt = `Classify this support ticket as billing, outage, login, shipping or refund.\nTicket: ${ticket}\nCategory:`;
    if (seen.has(prompt)) continue;
    seen.add(prompt);
    rows.push({ prompt, answer: label });
  }
  return rows;
}

export function writeTicketData(outDir: string, trainRows: number, evalRows: number): { train: string; eval: string } {
  const evalSet = generateTickets(evalRows, 7, new Set(), 'held-out');
  const train = generateTickets(trainRows, 1, new Set(evalSet.map((r) => r.prompt)), 'train');
  fs.mkdirSync(outDir, { recursive: true });
  const files = { train: path.join(outDir, 'train.jsonl'), eval: path.join(outDir, 'eval.jsonl') };
  fs.writeFileSync(files.train, train.map((r) => JSON.stringify(r)).join('\n') + '\n');
  fs.writeFileSync(files.eval, evalSet.map((r) => JSON.stringify(r)).join('\n') + '\n');
  return files;
}

/**
 * A held-out test set (`data.test`) of `rows` tickets in held-out phrasings, none of them in the folder's
 * `train.jsonl` or `eval.jsonl`, written as `<dir>/<name>`. Returns `name`.
 */
export function writeTicketTestSet(dir: string, name: string, rows: number, seed: number): string {
  const prompts = (f: string) =>
    fs
      .readFileSync(path.join(dir, f), 'utf8')
      .trim()
      .split('\n')
      .map((l) => (JSON.parse(l) as { prompt: string }).prompt);
  const test = generateTickets(rows, seed, new Set([...prompts('train.jsonl'), ...prompts('eval.jsonl')]), 'held-out');
  fs.writeFileSync(path.join(dir, name), test.map((r) => JSON.stringify(r)).join('\n') + '\n');
  return name;
}

/**
 * Preference pairs for a DPO round: each ticket with its right category chosen and another category rejected
 * (picked by a seeded draw). Written as `pairs.train.jsonl` and `pairs.eval.jsonl`.
 */
export function writeTicketPreferences(outDir: string, trainRows: number, evalRows: number): { train: string; eval: string } {
  const evalSet = generateTickets(evalRows, 7, new Set(), 'held-out');
  const train = generateTickets(trainRows, 1, new Set(evalSet.map((r) => r.prompt)), 'train');
  const labels = Object.keys(CATEGORIES);
  const random = seededRandom(11);
  const pair = (r: { prompt: string; answer: string }) => {
    const others = labels.filter((l) => l !== r.answer);
    return { prompt: r.prompt, chosen: r.answer, rejected: others[Math.floor(random() * others.length)]! };
  };
  fs.mkdirSync(outDir, { recursive: true });
  const files = { train: path.join(outDir, 'pairs.train.jsonl'), eval: path.join(outDir, 'pairs.eval.jsonl') };
  fs.writeFileSync(files.train, train.map((r) => JSON.stringify(pair(r))).join('\n') + '\n');
  fs.writeFileSync(files.eval, evalSet.map((r) => JSON.stringify(pair(r))).join('\n') + '\n');
  return files;
}

if (require.main === module) {
  const [train = '300', evalRows = '60', out = __dirname] = process.argv.slice(2);
  const files = writeTicketData(out, Number(train), Number(evalRows));
  process.stdout.write(`wrote ${files.train} and ${files.eval}\n`);
}
