/* file.h: whole-file reads, folder creation and the program's data files. */
#ifndef BASE_FILE_H
#define BASE_FILE_H

#include <stddef.h>

/* Reads a whole file (NUL-terminated; *len excludes the NUL). */
char *file_read(const char *path, size_t *len, char *err);

/* Finds a data file shipped with the program (presets, plot scripts, the
 * sample trace) by its path relative to the repository root: first beside
 * the running binary (a build tree: ./agentreplay or
 * build/<variant>/agentreplay), then under the install prefix
 * (AGENTREPLAY_DATADIR), then relative to the current directory. Writes
 * the path into buf (size n); returns 0, or -1 if not found. */
int file_data_path(const char *rel, char *buf, size_t n);

/* Creates a folder and its parents (as mkdir -p); an error names the part
 * that failed, or a part that exists and is not a folder. */
int file_mkdir_p(const char *path, char *err);

#endif
