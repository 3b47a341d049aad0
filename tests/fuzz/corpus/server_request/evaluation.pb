r2.a0.c0.eval d)333333Ó?2
accuracy)\Âõ(ì?