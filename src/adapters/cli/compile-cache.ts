import module from 'node:module';

// Imported first by main.ts, so that it runs before the CLI's other chunks load: on Node 22.1 and
// later, V8's compiled code for them is kept on disk between command lines (in the OS's temp
// directory, checked against each file's contents), and a command line compiles little of the
// bundle again. Node 20 has no such cache: there this does nothing.
(module as { enableCompileCache?: () => unknown }).enableCompileCache?.();
