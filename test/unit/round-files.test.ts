import path from 'node:path';
import { joinLocation } from '../../config/io/artifacts';
import { pythonStepFiles, roundFiles, samplesFile, scoreFiles, stepName, stepsFolder } from '../../config/rules/round-files';

// The names campaigns have always written: a change here makes old campaigns' files unreadable.
describe('a round’s file names', () => {
  const dir = '/runs/c1';

  test('round 3 beside its report, the first lineage and lineage 2', () => {
    const f = roundFiles(dir, 3);
    expect({
      report: f.report,
      steps: f.steps,
      evaluations: f.evaluations,
      poolEvaluations: f.poolEvaluations,
      testEvaluations: f.testEvaluations,
      evaluationsAt: [f.evaluationsAt(8), f.evaluationsAt(8, 0), f.evaluationsAt(8, 2)],
      referenceLogprobs: f.referenceLogprobs,
      samples: [f.samples(), f.samples(0), f.samples(2)],
      rewards: f.rewards,
      episodes: f.episodes,
      pythonData: f.pythonData,
      trainData: f.trainData,
    }).toEqual({
      report: '/runs/c1/round-3.json',
      steps: '/runs/c1/round-3.steps',
      evaluations: '/runs/c1/round-3.evaluations.json',
      poolEvaluations: '/runs/c1/round-3.pool-evaluations.json',
      testEvaluations: '/runs/c1/round-3.test-evaluations.json',
      evaluationsAt: [
        '/runs/c1/round-3.evaluations-s8.json',
        '/runs/c1/round-3.evaluations-s8.json',
        '/runs/c1/round-3.evaluations-s8.L2.json',
      ],
      referenceLogprobs: '/runs/c1/round-3.reference-logprobs.json',
      samples: ['/runs/c1/round-3.samples', '/runs/c1/round-3.samples', '/runs/c1/round-3.samples.L2'],
      rewards: '/runs/c1/round-3.rewards',
      episodes: '/runs/c1/round-3.episodes',
      pythonData: '/runs/c1/round-3.python.jsonl',
      trainData: '/runs/c1/round-3.train.jsonl',
    });
  });

  test('joined by the store: a local folder is normalised, an S3 prefix keeps its scheme', () => {
    expect(roundFiles('/runs/c1/', 3, joinLocation).trainData).toBe(path.join('/runs/c1/', 'round-3.train.jsonl'));
    expect(roundFiles('s3://bucket/runs/c1/', 3, joinLocation).pythonData).toBe('s3://bucket/runs/c1/round-3.python.jsonl');
  });

  test('inside the steps folder: step records, evaluation records and the tracking cursor', () => {
    const steps = roundFiles(dir, 3).steps;
    expect([stepsFolder.records(steps, 12, undefined, joinLocation), stepsFolder.records(steps, 12, 2, joinLocation)]).toEqual([
      '/runs/c1/round-3.steps/steps-0000012.json',
      '/runs/c1/round-3.steps/steps-0000012.L2.json',
    ]);
    expect([stepsFolder.evaluation(steps, 8, 0, joinLocation), stepsFolder.evaluation(steps, 8, 2, joinLocation)]).toEqual([
      '/runs/c1/round-3.steps/eval-0000008.json',
      '/runs/c1/round-3.steps/eval-0000008.L2.json',
    ]);
    expect(stepsFolder.trackingCursor(steps, joinLocation)).toBe('/runs/c1/round-3.steps/tracked.json');
    expect(
      ['steps-0000012.json', 'steps-0000012.L2.json', 'eval-0000008.json', 'tracked.json'].map((n) =>
        stepsFolder.isRecords(`${steps}/${n}`),
      ),
    ).toEqual([true, true, false, false]);
  });

  test('GRPO: samples per step; a Python reward’s and an environment’s batches and gateways carry the lineage before the step', () => {
    const f = roundFiles(dir, 3);
    expect(stepName(12)).toBe('s0000012');
    expect(samplesFile(f.samples(2), 12, joinLocation)).toBe('/runs/c1/round-3.samples.L2/s0000012.json');
    expect([pythonStepFiles.batch(f.rewards, 12, 0, joinLocation), pythonStepFiles.batch(f.rewards, 12, 2, joinLocation)]).toEqual([
      '/runs/c1/round-3.rewards/batches/s0000012.json',
      '/runs/c1/round-3.rewards/batches/L2-s0000012.json',
    ]);
    expect([pythonStepFiles.gateway(f.episodes, 12, 0, joinLocation), pythonStepFiles.gateway(f.episodes, 12, 2, joinLocation)]).toEqual([
      '/runs/c1/round-3.episodes/gateways/s0000012.json',
      '/runs/c1/round-3.episodes/gateways/L2-s0000012.json',
    ]);
    expect(pythonStepFiles.records(f.episodes, 12, joinLocation)).toBe('/runs/c1/round-3.episodes/s0000012');
  });

  test('a Python scorer’s batches: in `scores` beside the evaluations, one per pass, the lineage after the label', () => {
    const folder = scoreFiles.folder(roundFiles(dir, 3).evaluationsAt(8, 2), joinLocation);
    expect(folder).toBe('/runs/c1/scores');
    expect([scoreFiles.pass('eval-s8', 0), scoreFiles.pass('eval-s8', 2)]).toEqual(['eval-s8', 'eval-s8.L2']);
    expect(scoreFiles.batch(folder, scoreFiles.pass('sample', 2), joinLocation)).toBe('/runs/c1/scores/batches/sample.L2.json');
  });
});
