import { execFileSync } from 'node:child_process';
import path from 'node:path';

/**
 * DESIGN.md's layout table ("may import") is enforced by eslint.config.mjs (`no-restricted-imports` per folder).
 * Each case lints one import, as a file of that folder, with the project's own config.
 */
interface Case {
  folder: string;
  code: string;
  allowed: boolean;
}

const cases: Case[] = [
  { folder: 'config/io', code: "import { ConfigError } from '../rules/errors';", allowed: true },
  { folder: 'config/io', code: "import fs from 'node:fs';", allowed: true },
  { folder: 'config/rules', code: "import { seededRandom } from './random';", allowed: true },
  { folder: 'config/rules', code: "import type { LrSchedule } from '../io/spec';", allowed: true },
  { folder: 'config/rules', code: "import { loadCampaignSpec } from '../io/spec';", allowed: false },
  { folder: 'config/rules', code: "import fs from 'node:fs';", allowed: false },
  { folder: 'config/rules', code: "import { z } from 'zod';", allowed: false },
  { folder: 'config/rules', code: "import { Context } from '@temporalio/activity';", allowed: false },
  { folder: 'config', code: "import { roundWorkflow } from '../workflows/round/round';", allowed: false },
  { folder: 'config', code: "import type { Activities } from '../activities';", allowed: false },
  { folder: 'config', code: "import { Context } from '@temporalio/activity';", allowed: false },

  { folder: 'workflows', code: "import { proxyActivities } from '@temporalio/workflow';", allowed: true },
  { folder: 'workflows', code: "import type { Activities } from '../activities';", allowed: true },
  { folder: 'workflows', code: "import { createActivities } from '../activities';", allowed: false },
  { folder: 'workflows', code: "import { ProviderRegistry } from '../workers/providers';", allowed: false },
  { folder: 'workflows', code: "import { seededRandom } from '../config/rules/random';", allowed: true },
  { folder: 'workflows', code: "import { ownerTagFor } from '../config/rules/owner-tag';", allowed: true },
  { folder: 'workflows', code: "import { ACQUIRE_GATE_UPDATE } from '../config/rules/provision-gate';", allowed: true },
  { folder: 'workflows', code: "import type { CampaignSpec } from '../config/io/spec';", allowed: true },
  { folder: 'workflows', code: "import { loadCampaignSpec } from '../config/io/spec';", allowed: false },
  { folder: 'workflows', code: "import fs from 'node:fs';", allowed: false },
  { folder: 'workflows', code: "import { Context } from '@temporalio/activity';", allowed: false },

  { folder: 'activities', code: "import { ProviderError } from '../providers/errors';", allowed: true },
  { folder: 'activities', code: "import { ownerOfTag } from '../config/rules/owner-tag';", allowed: true },
  { folder: 'activities', code: "import type { RoundInput } from '../workflows/round/contract';", allowed: true },
  { folder: 'activities', code: "import { ownerTagFor } from '../workflows/round/contract';", allowed: false },
  { folder: 'activities', code: "import { acquireGateUpdate } from '../workflows/provision-gate/contract';", allowed: false },
  { folder: 'activities', code: "import { startEmulator } from '../emulator/server';", allowed: false },
  { folder: 'activities', code: "import { ProviderRegistry } from '../workers/providers';", allowed: false },

  { folder: 'providers/together', code: "import { ConfigError } from '../../config/rules/errors';", allowed: true },
  { folder: 'providers/together', code: "import { HttpClient } from '../http';", allowed: true },
  { folder: 'providers/together', code: "import { ApplicationFailure } from '@temporalio/common';", allowed: false },
  { folder: 'providers/together', code: "import { atBoundary } from '../../activities/failures';", allowed: false },

  { folder: 'emulator', code: "import { badRequest } from './errors';", allowed: true },
  { folder: 'emulator/together', code: "import { tokenizerFor } from '../../config/io/tokenizer';", allowed: false },
  { folder: 'emulator', code: "import { checkDatum } from '../providers/datum';", allowed: false },

  { folder: 'workers', code: "import { createActivities } from '../activities';", allowed: true },
  { folder: 'workers', code: "import { startEmulator } from '../emulator/server';", allowed: true },
  { folder: 'workers', code: "import { main } from '../cli/main';", allowed: false },

  { folder: 'cli', code: "import { loadCampaignSpec } from '../config/io/spec';", allowed: true },
  { folder: 'cli', code: "import { reapOnce } from '../workers/reap';", allowed: true },
  { folder: 'cli', code: "import { Client } from '@temporalio/client';", allowed: true },
  { folder: 'cli', code: "import { campaignProgressQuery } from '../workflows/campaign/contract';", allowed: true },
  { folder: 'cli', code: "import type { CampaignResult } from '../workflows/campaign/campaign';", allowed: true },
  { folder: 'cli', code: "import { campaignWorkflow } from '../workflows/campaign/campaign';", allowed: false },
  { folder: 'cli', code: "import { campaignWorkflow } from '../workflows';", allowed: true },
  { folder: 'cli', code: "import { reapOrphans } from '../activities/reaper';", allowed: false },
  { folder: 'cli', code: "import { startEmulator } from '../emulator/server';", allowed: false },
  { folder: 'cli', code: "import { TogetherProvider } from '../providers/together/client';", allowed: false },
  { folder: 'cli', code: "import { NativeConnection } from '@temporalio/worker';", allowed: false },

  { folder: 'test/unit', code: "import { reapOrphans } from '../../activities/reaper';", allowed: true },
];

interface LintMessage {
  ruleId: string | null;
  fatal?: boolean;
  message: string;
}

function lintSnippets(snippets: { filePath: string; code: string }[]): LintMessage[][] {
  const probe = path.resolve(__dirname, '../helpers/lint-snippets.mjs');
  return JSON.parse(execFileSync(process.execPath, [probe], { input: JSON.stringify(snippets), encoding: 'utf8' })) as LintMessage[][];
}

describe('the import walls of DESIGN.md are lint rules', () => {
  let results: LintMessage[][] = [];
  beforeAll(() => {
    results = lintSnippets(cases.map((c, i) => ({ filePath: `${c.folder}/wall-probe-${i}.ts`, code: `${c.code}\n` })));
  });

  test.each(cases.map((c, i) => [c.allowed ? 'allows' : 'forbids', c.folder, c.code, i] as const))(
    '%s in %s/: %s',
    (_verdict, _folder, _code, i) => {
      const messages = results[i]!;
      expect(messages.filter((m) => m.fatal)).toEqual([]);
      const walls = messages.filter((m) => m.ruleId === 'no-restricted-imports');
      if (cases[i]!.allowed) expect(walls).toEqual([]);
      else expect(walls.length).toBeGreaterThan(0);
    },
  );
});
