import { Context } from '@temporalio/activity';

export interface WorkerDescription {
  pid: number;
  node: string;
  echo: string;
}

export async function describeWorker(greeting: string): Promise<WorkerDescription> {
  Context.current().log.info('preflight activity ran', { greeting });
  return { pid: process.pid, node: process.version, echo: greeting };
}
