export default async function globalTeardown(): Promise<void> {
  await globalThis.__roundhouseS3?.close();
  await globalThis.__roundhouseTemporal?.stop();
}
