import type * as Logging from '../config/io/logging';
import type * as Spec from '../config/io/spec';
import type * as WorkerEnv from '../config/io/worker-env';
import type * as CampaignData from '../workers/campaign-data';
import type * as CodecAuth from '../workers/codec-auth';
import type * as CodecServer from '../workers/codec-server';
import type * as EmulatorProcess from '../workers/emulator-process';
import type * as Encryption from '../workers/encryption';
import type * as PythonWorkers from '../workers/python-workers';
import type * as Reap from '../workers/reap';
import type * as Report from '../workers/report';
import type * as Schedules from '../workers/schedules';
import type * as TemporalServer from '../workers/temporal-server';
import type * as Validate from '../workers/validate';
import type * as Worker from '../workers/worker';
import type * as Workflows from '../workflows';
import type * as Contract from '../workflows/campaign/contract';
import type * as PromotionContract from '../workflows/campaign/promotion-contract';
import type * as Context from './context';
import type * as Progress from './progress';
import type * as TemporalClient from '@temporalio/client';
import { lazy } from './lazy';

/**
 * The modules the commands use, each loaded when a command first calls it (cli/lazy.ts), so the CLI's start and
 * `--help` load none of them: `modules.worker().assembleWorker(…)`. Declared once here for every command.
 */
export const modules = {
  /** To report an error (the CLI's start stays light). */
  logging: lazy(() => require('../config/io/logging') as typeof Logging),
  spec: lazy(() => require('../config/io/spec') as typeof Spec),
  workerEnv: lazy(() => require('../config/io/worker-env') as typeof WorkerEnv),
  campaignData: lazy(() => require('../workers/campaign-data') as typeof CampaignData),
  codecAuth: lazy(() => require('../workers/codec-auth') as typeof CodecAuth),
  codecServer: lazy(() => require('../workers/codec-server') as typeof CodecServer),
  emulatorProcess: lazy(() => require('../workers/emulator-process') as typeof EmulatorProcess),
  encryption: lazy(() => require('../workers/encryption') as typeof Encryption),
  pythonWorkers: lazy(() => require('../workers/python-workers') as typeof PythonWorkers),
  reap: lazy(() => require('../workers/reap') as typeof Reap),
  report: lazy(() => require('../workers/report') as typeof Report),
  schedules: lazy(() => require('../workers/schedules') as typeof Schedules),
  temporalServer: lazy(() => require('../workers/temporal-server') as typeof TemporalServer),
  validate: lazy(() => require('../workers/validate') as typeof Validate),
  worker: lazy(() => require('../workers/worker') as typeof Worker),
  workflows: lazy(() => require('../workflows') as typeof Workflows),
  contract: lazy(() => require('../workflows/campaign/contract') as typeof Contract),
  promotionContract: lazy(() => require('../workflows/campaign/promotion-contract') as typeof PromotionContract),
  context: lazy(() => require('./context') as typeof Context),
  progress: lazy(() => require('./progress') as typeof Progress),
  temporalClient: lazy(() => require('@temporalio/client') as typeof TemporalClient),
};
