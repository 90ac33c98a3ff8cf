/*
 * train.h - the `prnn train`, `prnn sample` and `prnn eval` commands: the
 * training loop over prnn_model (prnn_model.h) with the trainer's options,
 * data, checkpoints and log (options.h, data.h, ckpt.h, log.h).
 *
 * Each takes the arguments after its subcommand and returns the process's
 * exit code: 0 on success, 2 for bad arguments, 1 for any other failure
 * (unreadable or corrupt files, a device error), always with a message on
 * stderr that says what and where.
 */
#ifndef PRNN_TRAIN_TRAIN_H
#define PRNN_TRAIN_TRAIN_H

int train_cmd_train(int argc, char **argv);
int train_cmd_sample(int argc, char **argv);
int train_cmd_eval(int argc, char **argv);

#endif /* PRNN_TRAIN_TRAIN_H */
